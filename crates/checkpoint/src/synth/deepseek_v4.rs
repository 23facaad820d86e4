//! What `plumb synth` writes for DeepSeek V4 (`DeepseekV4ForCausalLM`): the tensors of the
//! backbone as the Hugging Face checkpoint names and shapes them — low-rank q, one shared K = V
//! head, the CSA / HCA compressors and the lightning indexer per `layer_types`, the grouped
//! output projection, hyper-connection parameters, hash-routed (`tid2eid`) or learned (`gate.bias`)
//! routers per `mlp_layer_types`, routed and shared SwiGLU experts, the HC head and the untied
//! `head`. Norm weights, hyper-connection parameters, sinks, position biases and router biases
//! are float32 whatever the weights' dtype, as the checkpoint keeps them; `tid2eid` is int64.
//! Initialisation keeps every layer's output finite and of unit scale: projections std 1/√fan-in,
//! norms ones, hyper-connection mixes small so the streams start nearly as the identity mix.

use super::arch::{Init, Stored, TensorSpec, linears, spec};
use crate::error::CheckpointError;
use crate::hparams::ModelConfig;
use serde_json::{Map, Value};

/// The keys of a V4 config that shape its tensors beyond `ModelConfig`.
#[derive(Clone, Debug, PartialEq)]
pub struct V4Shape {
    /// Per layer: 0 sliding only, else the compression ratio; `true` where the ratio is CSA's.
    pub layers: Vec<(usize, bool)>,
    /// Per layer: hash-routed MoE.
    pub hash_moe: Vec<bool>,
    pub q_lora_rank: usize,
    pub o_groups: usize,
    pub o_lora_rank: usize,
    pub index_heads: usize,
    pub index_head_dim: usize,
    pub num_experts: usize,
    pub top_k: usize,
    pub num_shared: usize,
    pub moe_intermediate_size: usize,
    pub hc_mult: usize,
}

fn bad(file: &str, key: &str, why: impl Into<String>) -> CheckpointError {
    CheckpointError::BadConfig { file: file.into(), key: key.into(), why: why.into() }
}

fn positive(m: &Map<String, Value>, file: &str, key: &str) -> Result<usize, CheckpointError> {
    match m.get(key).and_then(Value::as_u64) {
        Some(n) if n > 0 => Ok(n as usize),
        _ => Err(bad(file, key, "must be a positive integer")),
    }
}

fn strings<'a>(m: &'a Map<String, Value>, file: &str, key: &str, n: usize) -> Result<Vec<&'a str>, CheckpointError> {
    let list: Vec<&str> = m
        .get(key)
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(Value::as_str).collect())
        .ok_or_else(|| bad(file, key, "must be a list of strings"))?;
    if list.len() != n {
        return Err(bad(file, key, format!("has {} entries for {n} layers", list.len())));
    }
    Ok(list)
}

impl V4Shape {
    pub fn parse(m: &Map<String, Value>, file: &str, num_layers: usize) -> Result<V4Shape, CheckpointError> {
        let rates = m.get("compress_rates").and_then(Value::as_object);
        let rate = |name: &str| {
            rates
                .and_then(|r| r.get(name))
                .and_then(Value::as_u64)
                .filter(|&r| r > 0)
                .map(|r| r as usize)
                .ok_or_else(|| bad(file, "compress_rates", format!("has no positive `{name}`")))
        };
        let (csa, hca) = (rate("compressed_sparse_attention")?, rate("heavily_compressed_attention")?);
        let layers = strings(m, file, "layer_types", num_layers)?
            .into_iter()
            .map(|t| match t {
                "sliding_attention" => Ok((0, false)),
                "compressed_sparse_attention" => Ok((csa, true)),
                "heavily_compressed_attention" => Ok((hca, false)),
                other => Err(bad(file, "layer_types", format!("holds `{other}`"))),
            })
            .collect::<Result<_, _>>()?;
        let hash_moe = strings(m, file, "mlp_layer_types", num_layers)?
            .into_iter()
            .map(|t| match t {
                "hash_moe" => Ok(true),
                "moe" => Ok(false),
                other => Err(bad(file, "mlp_layer_types", format!("holds `{other}`"))),
            })
            .collect::<Result<_, _>>()?;
        let num_experts = positive(m, file, "n_routed_experts")?;
        let top_k = positive(m, file, "num_experts_per_tok")?;
        if top_k > num_experts {
            return Err(bad(file, "num_experts_per_tok", format!("is {top_k}, more than the {num_experts} experts")));
        }
        Ok(V4Shape {
            layers,
            hash_moe,
            q_lora_rank: positive(m, file, "q_lora_rank")?,
            o_groups: positive(m, file, "o_groups")?,
            o_lora_rank: positive(m, file, "o_lora_rank")?,
            index_heads: positive(m, file, "index_n_heads")?,
            index_head_dim: positive(m, file, "index_head_dim")?,
            num_experts,
            top_k,
            num_shared: m.get("n_shared_experts").and_then(Value::as_u64).unwrap_or(0) as usize,
            moe_intermediate_size: positive(m, file, "moe_intermediate_size")?,
            hc_mult: positive(m, file, "hc_mult")?,
        })
    }

    /// Every tensor, in the checkpoint's order.
    pub fn tensors(&self, c: &ModelConfig) -> Vec<TensorSpec> {
        let (hidden, vocab, n) = (c.hidden_size, c.vocab_size, self.hc_mult);
        let f32_spec =
            |name: String, shape: Vec<usize>, init: Init| TensorSpec { stored: Stored::F32, ..spec(name, shape, init) };
        let mut out = Vec::new();
        linears(&mut out, "model", &[("embed_tokens", vocab, hidden)], false);
        // Hyper-connection mixes: small, so each sublayer starts close to an even mix.
        let hc = |out: &mut Vec<TensorSpec>, prefix: &str, rows: usize, scales: usize| {
            out.push(f32_spec(
                format!("{prefix}_fn"),
                vec![rows, n * hidden],
                Init::Random { std: 0.02 / ((n * hidden) as f64).sqrt() },
            ));
            out.push(f32_spec(format!("{prefix}_base"), vec![rows], Init::Zeros));
            out.push(f32_spec(format!("{prefix}_scale"), vec![scales], Init::Ones));
        };
        for (i, (&(ratio, csa), &hash)) in self.layers.iter().zip(&self.hash_moe).enumerate() {
            let p = format!("model.layers.{i}");
            let a = format!("{p}.attn");
            let d = c.head_dim;
            out.push(f32_spec(format!("{a}.attn_sink"), vec![c.num_attention_heads], Init::Zeros));
            out.push(f32_spec(format!("{a}.norm.weight"), vec![d], Init::Ones));
            out.push(f32_spec(format!("{a}.q_norm.weight"), vec![self.q_lora_rank], Init::Ones));
            let group_in = c.num_attention_heads * d / self.o_groups;
            linears(
                &mut out,
                &a,
                &[
                    ("wkv", d, hidden),
                    ("wo_a", self.o_groups * self.o_lora_rank, group_in),
                    ("wo_b", hidden, self.o_groups * self.o_lora_rank),
                    ("wq_a", self.q_lora_rank, hidden),
                    ("wq_b", c.num_attention_heads * d, self.q_lora_rank),
                ],
                false,
            );
            out.push(f32_spec(format!("{p}.attn_norm.weight"), vec![hidden], Init::Ones));
            let swiglu = |inter: usize| [("w1", inter, hidden), ("w2", hidden, inter), ("w3", inter, hidden)];
            for e in 0..self.num_experts {
                linears(&mut out, &format!("{p}.ffn.experts.{e}"), &swiglu(self.moe_intermediate_size), false);
            }
            if hash {
                let init = Init::ExpertIds { num_experts: self.num_experts, per_token: self.top_k };
                out.push(TensorSpec {
                    stored: Stored::I64,
                    ..spec(format!("{p}.ffn.gate.tid2eid"), vec![vocab, self.top_k], init)
                });
            }
            linears(&mut out, &format!("{p}.ffn"), &[("gate", self.num_experts, hidden)], false);
            if self.num_shared > 0 {
                linears(
                    &mut out,
                    &format!("{p}.ffn.shared_experts"),
                    &swiglu(self.num_shared * self.moe_intermediate_size),
                    false,
                );
            }
            out.push(f32_spec(format!("{p}.ffn_norm.weight"), vec![hidden], Init::Ones));
            hc(&mut out, &format!("{p}.hc_attn"), (2 + n) * n, 3);
            hc(&mut out, &format!("{p}.hc_ffn"), (2 + n) * n, 3);
            if ratio > 0 {
                let series = if csa { 2 } else { 1 };
                let comp = format!("{a}.compressor");
                out.push(f32_spec(format!("{comp}.ape"), vec![ratio, series * d], Init::Random { std: 0.02 }));
                out.push(f32_spec(format!("{comp}.norm.weight"), vec![d], Init::Ones));
                linears(&mut out, &comp, &[("wgate", series * d, hidden), ("wkv", series * d, hidden)], false);
                if csa {
                    let (ih, id) = (self.index_heads, self.index_head_dim);
                    let ic = format!("{a}.indexer.compressor");
                    out.push(f32_spec(format!("{ic}.ape"), vec![ratio, 2 * id], Init::Random { std: 0.02 }));
                    out.push(f32_spec(format!("{ic}.norm.weight"), vec![id], Init::Ones));
                    linears(&mut out, &ic, &[("wgate", 2 * id, hidden), ("wkv", 2 * id, hidden)], false);
                    linears(
                        &mut out,
                        &format!("{a}.indexer"),
                        &[("weights_proj", ih, hidden), ("wq_b", ih * id, self.q_lora_rank)],
                        false,
                    );
                }
            }
            if !hash {
                out.push(f32_spec(format!("{p}.ffn.gate.bias"), vec![self.num_experts], Init::Zeros));
            }
        }
        hc(&mut out, "model.hc_head.hc", n, 1);
        out.push(f32_spec("model.norm.weight".into(), vec![hidden], Init::Ones));
        let std = 1.0 / (hidden as f64).sqrt();
        out.push(spec("head.weight".into(), vec![vocab, hidden], Init::Random { std }));
        out
    }
}
