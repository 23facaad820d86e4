//! The DeepSeek V4 family (`DeepseekV4ForCausalLM`, the V4-Flash/Pro backbone): the token
//! embedding copied into `hc_mult` residual streams; per layer, an mHC collapse → RMSNorm →
//! compressed attention (sliding only, CSA or HCA, as `layer_types` says) → mHC re-expansion,
//! then the same around a scored MoE (hash-routed or learned, as `mlp_layer_types` says); the
//! final HC head → RMSNorm → untied head. Its own part of config.json is read and checked here.
//! A sequence's state (raw K, compressor rows, compressed entries and indexer keys) is a row
//! per position per layer in the paged KV cache (`layers::compressed_state`), so lanes, the
//! prefix cache, preemption and chunked prefill work as for any attention model, bit for bit.

use crate::layers::compressed_attention::{AttentionKind, AttentionSpec, CompressedAttention, RopeTables};
use crate::layers::compressed_state::RowLayout;
use crate::layers::decoder::output_head;
use crate::layers::loader::WeightLoader;
use crate::layers::scored_moe::{ScoredMoe, ScoredMoeSpec};
use crate::registry::ModelError;
use crate::{CausalLm, Trace};
use plumb_checkpoint::{CheckpointError, ModelConfig};
use plumb_core::{Backend, ForwardBatch, FullBackend, HcSpec, KvSpec, LaneStateSpec, Shape};
use serde_json::{Map, Value};

/// DeepSeek V4's own settings.
#[derive(Clone, Debug, PartialEq)]
pub struct V4Config {
    pub attention: Vec<AttentionKind>,
    /// Whether layer i routes by the token → experts table.
    pub hash_moe: Vec<bool>,
    pub q_lora_rank: usize,
    pub o_groups: usize,
    pub o_lora_rank: usize,
    pub sliding_window: usize,
    pub hc: HcSpec,
    pub moe: ScoredMoeSpec,
    /// RoPE of the sliding-only layers and of the compressed ones ([rope_dim / 2] each).
    pub main_inv_freq: Vec<f64>,
    pub compress_inv_freq: Vec<f64>,
}

/// YaRN inverse frequencies as transformers computes them (`_compute_yarn_parameters`, with
/// `truncate`): a per-dimension blend of `θ^(−2i/d)` and the same divided by `factor`.
pub fn yarn_inv_freq(
    theta: f64,
    dim: usize,
    factor: f64,
    original_max: f64,
    beta_fast: f64,
    beta_slow: f64,
) -> Vec<f64> {
    let d = dim as f64;
    let correction =
        |rotations: f64| d * (original_max / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln());
    let low = correction(beta_fast).floor().max(0.0);
    let mut high = correction(beta_slow).ceil().min(d - 1.0);
    if low == high {
        high += 0.001;
    }
    (0..dim / 2)
        .map(|i| {
            let pos_freq = theta.powf((2 * i) as f64 / d);
            let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
            let extrapolation = 1.0 - ramp;
            (1.0 / (factor * pos_freq)) * (1.0 - extrapolation) + (1.0 / pos_freq) * extrapolation
        })
        .collect()
}

impl V4Config {
    /// Reads and checks the DeepSeek V4 keys of config.json. `file` names it in errors.
    pub fn from_hf(m: &Map<String, Value>, c: &ModelConfig, file: &str) -> Result<Self, ModelError> {
        let bad = |key: &str, why: String| {
            ModelError::Checkpoint(CheckpointError::BadConfig { file: file.into(), key: key.into(), why })
        };
        let size = |key: &str| {
            m.get(key)
                .and_then(Value::as_u64)
                .and_then(|x| usize::try_from(x).ok())
                .filter(|&x| x > 0)
                .ok_or_else(|| bad(key, format!("is {:?}, expected a positive integer", m.get(key))))
        };
        let num = |key: &str, default: f64| match m.get(key).filter(|v| !v.is_null()) {
            None => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| bad(key, format!("is {v}, expected a number"))),
        };
        let list = |key: &str| -> Result<Vec<String>, ModelError> {
            let v = m.get(key).ok_or_else(|| bad(key, "is missing".into()))?;
            let items = v
                .as_array()
                .and_then(|a| a.iter().map(|x| x.as_str().map(String::from)).collect::<Option<Vec<_>>>())
                .ok_or_else(|| bad(key, format!("is {v}, expected a list of strings")))?;
            if items.len() != c.num_hidden_layers {
                return Err(bad(key, format!("has {} entries for {} layers", items.len(), c.num_hidden_layers)));
            }
            Ok(items)
        };
        let flag = |key: &str, want: bool| match m.get(key).and_then(Value::as_bool) {
            Some(v) if v != want => Err(bad(key, format!("is {v}; plumb implements {want}"))),
            _ => Ok(()),
        };
        flag("attention_bias", false)?;
        flag("mlp_bias", false)?;
        flag("norm_topk_prob", true)?;
        if let Some(f) = m.get("scoring_func").and_then(Value::as_str).filter(|&f| f != "sqrtsoftplus") {
            return Err(bad("scoring_func", format!("is `{f}`; plumb implements sqrtsoftplus")));
        }
        if m.get("n_shared_experts").and_then(Value::as_u64).is_some_and(|n| n != 1) {
            return Err(bad("n_shared_experts", "must be 1 (one shared expert of moe_intermediate_size)".into()));
        }
        if c.num_key_value_heads != 1 {
            return Err(bad(
                "num_key_value_heads",
                format!("is {}; V4 has one shared K = V head", c.num_key_value_heads),
            ));
        }
        let rates = m.get("compress_rates").and_then(Value::as_object);
        let rate = |name: &str| {
            rates
                .and_then(|r| r.get(name))
                .and_then(Value::as_u64)
                .map(|x| x as usize)
                .filter(|&x| x > 0)
                .ok_or_else(|| bad("compress_rates", format!("has no positive `{name}`")))
        };
        let (index_heads, index_head_dim, top_k) =
            (size("index_n_heads")?, size("index_head_dim")?, size("index_topk")?);
        let attention = list("layer_types")?
            .iter()
            .map(|t| match t.as_str() {
                "sliding_attention" => Ok(AttentionKind::Sliding),
                "compressed_sparse_attention" => {
                    Ok(AttentionKind::Csa { ratio: rate(t)?, index_heads, index_head_dim, top_k })
                }
                "heavily_compressed_attention" => Ok(AttentionKind::Hca { ratio: rate(t)? }),
                other => Err(bad("layer_types", format!("holds `{other}`"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let hash_moe = list("mlp_layer_types")?
            .iter()
            .map(|t| match t.as_str() {
                "hash_moe" => Ok(true),
                "moe" => Ok(false),
                other => Err(bad("mlp_layer_types", format!("holds `{other}`"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (o_groups, heads) = (size("o_groups")?, c.num_attention_heads);
        if !heads.is_multiple_of(o_groups) {
            return Err(bad("o_groups", format!("is {o_groups}, which does not divide {heads} heads")));
        }
        let (main_inv_freq, compress_inv_freq) = rope_frequencies(m, c, &bad)?;
        let hc = HcSpec {
            num_streams: size("hc_mult")?,
            sinkhorn_iters: size("hc_sinkhorn_iters")?,
            hc_eps: num("hc_eps", 1e-6)?,
            norm_eps: c.rms_norm_eps,
        };
        let moe = ScoredMoeSpec {
            hidden: c.hidden_size,
            intermediate: c.intermediate_size,
            num_experts: size("n_routed_experts")?,
            top_k: size("num_experts_per_tok")?,
            routed_scaling: num("routed_scaling_factor", 1.5)?,
            swiglu_limit: num("swiglu_limit", 10.0)?,
        };
        Ok(V4Config {
            attention,
            hash_moe,
            q_lora_rank: size("q_lora_rank")?,
            o_groups,
            o_lora_rank: size("o_lora_rank")?,
            sliding_window: size("sliding_window")?,
            hc,
            moe,
            main_inv_freq,
            compress_inv_freq,
        })
    }
}

/// The `main` (plain) and `compress` (plain or YaRN with attention factor 1) frequencies from
/// the nested `rope_parameters` transformers 5 writes.
fn rope_frequencies(
    m: &Map<String, Value>,
    c: &ModelConfig,
    bad: &dyn Fn(&str, String) -> ModelError,
) -> Result<(Vec<f64>, Vec<f64>), ModelError> {
    let rp = m.get("rope_parameters").and_then(Value::as_object);
    let part = |name: &str| {
        rp.and_then(|r| r.get(name)).and_then(Value::as_object).ok_or_else(|| {
            bad("rope_parameters", format!("has no `{name}` object (transformers 5 nests `main` and `compress`)"))
        })
    };
    let (main, compress) = (part("main")?, part("compress")?);
    let f = |p: &Map<String, Value>, k: &str| p.get(k).and_then(Value::as_f64);
    let dim = c.rope_dim;
    if dim == 0 || !dim.is_multiple_of(2) {
        return Err(bad("partial_rotary_factor", format!("gives {dim} rotary dims; V4 rotates pairs")));
    }
    let plain = |theta: f64| (0..dim / 2).map(|i| 1.0 / theta.powf((2 * i) as f64 / dim as f64)).collect::<Vec<_>>();
    for (name, p) in [("main", main), ("compress", compress)] {
        if f(p, "partial_rotary_factor").is_some_and(|x| (c.head_dim as f64 * x) as usize != dim) {
            return Err(bad("rope_parameters", format!("`{name}` rotates a different slice than the top level")));
        }
    }
    if main.get("rope_type").and_then(Value::as_str).is_some_and(|t| t != "default") {
        return Err(bad("rope_parameters", "`main` must be plain RoPE".into()));
    }
    let theta = |p: &Map<String, Value>, name: &str| {
        f(p, "rope_theta").ok_or_else(|| bad("rope_parameters", format!("`{name}` has no rope_theta")))
    };
    let main_inv = plain(theta(main, "main")?);
    let ct = theta(compress, "compress")?;
    let compress_inv = match compress.get("rope_type").and_then(Value::as_str).unwrap_or("default") {
        "default" => plain(ct),
        "yarn" => {
            if f(compress, "attention_factor").is_some_and(|a| a != 1.0) {
                return Err(bad("rope_parameters", "`compress` YaRN with an attention factor other than 1".into()));
            }
            let need = |k: &str| f(compress, k).ok_or_else(|| bad("rope_parameters", format!("`compress` has no {k}")));
            let (bf, bs) = (f(compress, "beta_fast").unwrap_or(32.0), f(compress, "beta_slow").unwrap_or(1.0));
            yarn_inv_freq(ct, dim, need("factor")?, need("original_max_position_embeddings")?, bf, bs)
        }
        other => return Err(bad("rope_parameters", format!("`compress` has rope_type `{other}`"))),
    };
    Ok((main_inv, compress_inv))
}

/// Every attention layer's geometry and paged rows, and the width of the cache's one KV head
/// (half a K row, so a sliding layer's row is exactly one KV layer).
pub fn attention_specs(c: &ModelConfig, v4: &V4Config) -> (usize, Vec<(AttentionSpec, RowLayout)>) {
    let kv_head_dim = if c.head_dim.is_multiple_of(2) { c.head_dim / 2 } else { c.head_dim };
    let mut next = 0;
    let specs = v4
        .attention
        .iter()
        .map(|&kind| {
            let spec = AttentionSpec {
                hidden: c.hidden_size,
                num_heads: c.num_attention_heads,
                head_dim: c.head_dim,
                q_lora_rank: v4.q_lora_rank,
                o_groups: v4.o_groups,
                o_lora_rank: v4.o_lora_rank,
                sliding_window: v4.sliding_window,
                eps: c.rms_norm_eps,
                kind,
            };
            let rows = spec.row_layout(next, kv_head_dim);
            next += rows.num_layers;
            (spec, rows)
        })
        .collect();
    (kv_head_dim, specs)
}

/// The KV geometry of a V4 checkpoint from its config alone (`plumb inspect`), as the loaded
/// model declares it.
pub fn kv_layout(json: &Map<String, Value>, c: &ModelConfig, file: &str) -> Result<KvSpec, ModelError> {
    let v4 = V4Config::from_hf(json, c, file)?;
    let (head_dim, specs) = attention_specs(c, &v4);
    let num_layers = specs.last().map_or(0, |(_, rows)| rows.first_layer + rows.num_layers);
    Ok(KvSpec { num_layers, num_kv_heads: 1, head_dim, block_size: 1, num_blocks: 0, lane_state: LaneStateSpec::NONE })
}

/// One layer's hyper-connection parameters.
#[derive(Debug)]
struct Hc<B: Backend> {
    fn_w: B::Weight,
    base: B::Weight,
    scale: B::Weight,
}

impl<B: FullBackend> Hc<B> {
    fn load(w: &WeightLoader<'_, B>, p: &str, n: usize, hidden: usize) -> Result<Self, ModelError> {
        let mix = (2 + n) * n;
        Ok(Hc {
            fn_w: w.load_shaped(&format!("{p}_fn"), mix, n * hidden)?,
            base: w.load_shaped(&format!("{p}_base"), 1, mix)?,
            scale: w.load_shaped(&format!("{p}_scale"), 1, 3)?,
        })
    }
}

#[derive(Debug)]
struct Layer<B: Backend> {
    attn_hc: Hc<B>,
    attn_norm: B::Weight,
    attn: CompressedAttention<B>,
    ffn_hc: Hc<B>,
    ffn_norm: B::Weight,
    ffn: ScoredMoe<B>,
}

/// A loaded DeepSeek V4 model.
#[derive(Debug)]
pub struct DeepseekV4<B: Backend> {
    config: ModelConfig,
    /// Width of the cache's one KV head, and KV layers all attention layers' rows take.
    kv_head_dim: usize,
    kv_layers: usize,
    v4: V4Config,
    embed: B::Weight,
    layers: Vec<Layer<B>>,
    hc_head: Hc<B>,
    norm: B::Weight,
    head: B::Weight,
}

impl<B: FullBackend> DeepseekV4<B> {
    pub fn load(w: &WeightLoader<'_, B>, config: ModelConfig) -> Result<Self, ModelError> {
        let json = w.checkpoint.config_json().ok_or(ModelError::Unsupported("DeepSeek V4 from GGUF files"))?;
        let file = w.checkpoint.path().join("config.json").display().to_string();
        let v4 = V4Config::from_hf(json, &config, &file)?;
        if config.tie_word_embeddings {
            return Err(ModelError::Unsupported("DeepSeek V4 with tied embeddings"));
        }
        let c = &config;
        let (hidden, n) = (c.hidden_size, v4.hc.num_streams);
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        let (kv_head_dim, specs) = attention_specs(c, &v4);
        let kv_layers = specs.last().map_or(0, |(_, rows)| rows.first_layer + rows.num_layers);
        for (i, (&(spec, rows), &hash)) in specs.iter().zip(&v4.hash_moe).enumerate() {
            let p = format!("model.layers.{i}");
            layers.push(Layer {
                attn_hc: Hc::load(w, &format!("{p}.hc_attn"), n, hidden)?,
                attn_norm: w.load_shaped(&format!("{p}.attn_norm.weight"), 1, hidden)?,
                attn: CompressedAttention::load(w, &format!("{p}.attn"), spec, rows)?,
                ffn_hc: Hc::load(w, &format!("{p}.hc_ffn"), n, hidden)?,
                ffn_norm: w.load_shaped(&format!("{p}.ffn_norm.weight"), 1, hidden)?,
                ffn: ScoredMoe::load(w, &format!("{p}.ffn"), v4.moe, hash, c.vocab_size)?,
            });
        }
        let hc_head = Hc {
            fn_w: w.load_shaped("model.hc_head.hc_fn", n, n * hidden)?,
            base: w.load_shaped("model.hc_head.hc_base", 1, n)?,
            scale: w.load_shaped("model.hc_head.hc_scale", 1, 1)?,
        };
        let model = DeepseekV4 {
            embed: w.load_shaped("model.embed_tokens.weight", c.vocab_size, hidden)?,
            norm: w.load_shaped("model.norm.weight", 1, hidden)?,
            head: w.load_shaped("head.weight", c.vocab_size, hidden)?,
            hc_head,
            layers,
            kv_head_dim,
            kv_layers,
            v4,
            config,
        };
        // `mtp.*`: the multi-token-prediction layer (a draft head transformers also drops).
        w.finish(&["mtp.*"])?;
        Ok(model)
    }
}

impl<B: FullBackend> CausalLm<B> for DeepseekV4<B> {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// One KV head whose K and V planes hold every attention layer's paged rows; no lane state.
    fn kv_spec_for_lanes(&self, block_size: usize, num_blocks: usize, _num_lanes: usize) -> KvSpec {
        KvSpec {
            num_layers: self.kv_layers,
            num_kv_heads: 1,
            head_dim: self.kv_head_dim,
            block_size,
            num_blocks,
            lane_state: LaneStateSpec::NONE,
        }
    }

    fn forward(&self, b: &B, batch: &ForwardBatch, kv: &mut B::KvCache, mut trace: Option<Trace<'_, B>>) -> B::Tensor {
        let (hc_ops, c) = (b.hyper_connection_ops().expect("checked at load"), &self.config);
        let (n, hidden, s) = (batch.num_rows(), c.hidden_size, self.v4.hc.num_streams);
        b.begin_step(batch, kv);
        let mut x = b.tensor(n, hidden);
        b.embed(&batch.token_ids, &self.embed, &mut x);
        // Every stream starts as the embedding: post = 1 over zero streams and a zero mix.
        let mut streams = b.tensor(n, s * hidden);
        let (zeros, ones, no_mix) = (
            b.upload(&vec![0.0; n * s * hidden], n, s * hidden),
            b.upload(&vec![1.0; n * s], n, s),
            b.upload(&vec![0.0; n * s * s], n, s * s),
        );
        hc_ops.hc_post(&zeros, &x, &ones, &no_mix, &mut streams);
        let (main, compress) = (
            b.rope_table(&batch.positions, &self.v4.main_inv_freq),
            b.rope_table(&batch.positions, &self.v4.compress_inv_freq),
        );
        let rope = RopeTables { main: &main, compress: &compress, compress_inv_freq: &self.v4.compress_inv_freq };
        let eps = c.rms_norm_eps as f32;
        let (mut post, mut comb, mut collapsed) = (b.tensor(n, s), b.tensor(n, s * s), b.tensor(n, hidden));
        let mut normed = b.tensor(n, hidden);
        for (i, layer) in self.layers.iter().enumerate() {
            let hc = &layer.attn_hc;
            hc_ops.hc_pre(&streams, &hc.fn_w, &hc.base, &hc.scale, self.v4.hc, &mut post, &mut comb, &mut collapsed);
            b.rms_norm(&collapsed, &layer.attn_norm, eps, &mut normed);
            let a = layer.attn.forward(b, &normed, batch, &rope, kv, i, &mut trace);
            let mut next = b.tensor(n, s * hidden);
            hc_ops.hc_post(&streams, &a, &post, &comb, &mut next);
            let hc = &layer.ffn_hc;
            hc_ops.hc_pre(&next, &hc.fn_w, &hc.base, &hc.scale, self.v4.hc, &mut post, &mut comb, &mut collapsed);
            b.rms_norm(&collapsed, &layer.ffn_norm, eps, &mut normed);
            let f = layer.ffn.forward(b, &normed, &batch.token_ids, i, &mut trace);
            hc_ops.hc_post(&next, &f, &post, &comb, &mut streams);
            if let Some(t) = &mut trace {
                t("layer_out", Some(i), &streams);
            }
        }
        let h = &self.hc_head;
        hc_ops.hc_head(&streams, &h.fn_w, &h.base, &h.scale, self.v4.hc, &mut collapsed);
        let norm = |x: &B::Tensor, out: &mut B::Tensor| b.rms_norm(x, &self.norm, eps, out);
        debug_assert_eq!(collapsed.cols(), hidden);
        output_head(b, &collapsed, batch, c.vocab_size, &self.head, norm, &mut trace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_json() -> Map<String, Value> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/deepseek_v4/hf/config.json");
        let Value::Object(m) = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap() else {
            unreachable!()
        };
        m
    }

    fn with(edit: impl FnOnce(&mut Map<String, Value>)) -> Result<V4Config, ModelError> {
        let mut m = fixture_json();
        edit(&mut m);
        let c = ModelConfig::from_hf_json(&Value::Object(m.clone()).to_string())?;
        V4Config::from_hf(&m, &c, "config.json")
    }

    #[test]
    fn reads_the_fixture_config_and_its_yarn_frequencies_as_transformers_does() {
        let c = with(|_| {}).unwrap();
        let csa = AttentionKind::Csa { ratio: 4, index_heads: 2, index_head_dim: 16, top_k: 2 };
        assert_eq!(c.attention, [AttentionKind::Sliding, csa, AttentionKind::Hca { ratio: 8 }, csa]);
        assert_eq!(c.hash_moe, [true, false, false, false]);
        assert_eq!((c.hc.num_streams, c.hc.sinkhorn_iters, c.moe.top_k, c.moe.swiglu_limit), (4, 20, 2, 3.0));
        // transformers 5.24's `_compute_yarn_parameters` in float64 (Exact64) for this config.
        let hf = [1.0, 0.0125, 0.000625, 3.125e-05];
        for (got, want) in c.compress_inv_freq.iter().zip(hf) {
            assert!((got - want).abs() <= 2.0 * f64::EPSILON * want, "{got} vs {want}");
        }
        let main: Vec<f64> = (0..4).map(|i| 1.0 / 10000f64.powf(i as f64 / 4.0)).collect();
        assert_eq!(c.main_inv_freq, main);
    }

    #[test]
    fn refuses_what_it_does_not_implement() {
        type Edit = Box<dyn FnOnce(&mut Map<String, Value>)>;
        let cases: Vec<(Edit, &str)> = vec![
            (Box::new(|m| drop(m.insert("scoring_func".into(), "softmax".into()))), "sqrtsoftplus"),
            (Box::new(|m| drop(m.insert("n_shared_experts".into(), 2.into()))), "must be 1"),
            (Box::new(|m| drop(m["layer_types"].as_array_mut().unwrap().pop())), "3 entries for 4 layers"),
            (Box::new(|m| drop(m["mlp_layer_types"][1].take())), "expected a list of strings"),
            (Box::new(|m| m["compress_rates"].as_object_mut().unwrap().clear()), "compress_rates"),
            (Box::new(|m| drop(m.insert("o_groups".into(), 3.into()))), "does not divide 4 heads"),
            (
                Box::new(|m| {
                    drop(
                        m["rope_parameters"]["compress"]
                            .as_object_mut()
                            .unwrap()
                            .insert("attention_factor".into(), 1.5.into()),
                    )
                }),
                "attention factor",
            ),
            (Box::new(|m| drop(m["rope_parameters"].as_object_mut().unwrap().remove("main"))), "no `main`"),
            (
                Box::new(|m| drop(m.insert("compress_ratios".into(), serde_json::json!([0, 4, 128, 4])))),
                "compress_ratios",
            ),
        ];
        for (edit, want) in cases {
            let err = with(edit).unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} should contain {want:?}");
        }
    }
}
