//! The Qwen3.5 / 3.6 dense family (`Qwen3_5ForCausalLM`, and the text model of the
//! vision-language `Qwen3_5ForConditionalGeneration`): a hybrid decoder whose `layer_types` mix
//! Gated DeltaNet layers (three of four in released models) with gated full attention, zero-centred
//! RMSNorms, partial rotary embedding and a dense SwiGLU in every layer. The Gated DeltaNet
//! settings are this family's own part of config.json, read here.

use crate::layers::decoder::FeedForward;
use crate::layers::gated_delta::{GatedDeltaNet, GdnSpec};
use crate::layers::hybrid::{HybridDecoder, LayerLoaders};
use crate::layers::{loader::WeightLoader, rope};
use crate::registry::ModelError;
use crate::{CausalLm, Trace};
use plumb_checkpoint::{CheckpointError, CheckpointRef, ModelConfig};
use plumb_core::{Backend, ForwardBatch, FullBackend, GdnHeads, KvSpec};
use serde_json::{Map, Value};

/// The hybrid settings of a Qwen3.5-style config.json (shared with Qwen3.5-MoE and Qwen3-Next).
#[derive(Clone, Debug, PartialEq)]
pub struct HybridConfig {
    pub gdn: GdnSpec,
    /// Whether layer i is a Gated DeltaNet (`linear_attention`) layer.
    pub is_linear: Vec<bool>,
}

impl HybridConfig {
    /// Reads and checks `layer_types` (or `full_attention_interval`, default 4, as transformers)
    /// and the `linear_*` keys. `file` names the config in errors.
    pub fn from_hf(m: &Map<String, Value>, num_hidden_layers: usize, file: &str) -> Result<Self, ModelError> {
        let bad = |key: &str, why: String| {
            ModelError::Checkpoint(CheckpointError::BadConfig { file: file.into(), key: key.into(), why })
        };
        let size = |key: &str, default: usize| match m.get(key).filter(|v| !v.is_null()) {
            None => Ok(default),
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .filter(|&x| x > 0)
                .ok_or_else(|| bad(key, format!("is {v}, expected a positive integer"))),
        };
        let is_linear: Vec<bool> = match m.get("layer_types").filter(|v| !v.is_null()) {
            Some(v) => {
                let types = v
                    .as_array()
                    .and_then(|a| a.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
                    .ok_or_else(|| bad("layer_types", format!("is {v}, expected a list of strings")))?;
                if types.len() != num_hidden_layers {
                    return Err(bad(
                        "layer_types",
                        format!("has {} entries for {num_hidden_layers} layers", types.len()),
                    ));
                }
                types
                    .iter()
                    .map(|t| match *t {
                        "linear_attention" => Ok(true),
                        "full_attention" => Ok(false),
                        other => Err(bad(
                            "layer_types",
                            format!("holds `{other}`; plumb knows linear_attention and full_attention"),
                        )),
                    })
                    .collect::<Result<_, _>>()?
            }
            None => {
                let interval = size("full_attention_interval", 4)?;
                (0..num_hidden_layers).map(|i| !(i + 1).is_multiple_of(interval)).collect()
            }
        };
        let heads = GdnHeads {
            num_k_heads: size("linear_num_key_heads", 16)?,
            num_v_heads: size("linear_num_value_heads", 32)?,
            k_head_dim: size("linear_key_head_dim", 128)?,
            v_head_dim: size("linear_value_head_dim", 128)?,
        };
        if !heads.num_v_heads.is_multiple_of(heads.num_k_heads) {
            let why = format!(
                "is {}; it must be a multiple of linear_num_key_heads = {}",
                heads.num_v_heads, heads.num_k_heads
            );
            return Err(bad("linear_num_value_heads", why));
        }
        let conv_kernel = size("linear_conv_kernel_dim", 4)?;
        if conv_kernel < 2 {
            return Err(bad(
                "linear_conv_kernel_dim",
                format!("is {conv_kernel}; a causal conv state needs at least 2 taps"),
            ));
        }
        Ok(HybridConfig { gdn: GdnSpec { heads, conv_kernel }, is_linear })
    }
}

/// Where a checkpoint keeps the text model, and what else it holds that the graph does not use.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// `model` (flat `*ForCausalLM`) or `model.language_model` (vision-language).
    pub prefix: &'static str,
    /// Tensors the graph does not use, each listed with its reason (`WeightLoader::finish`).
    pub ignored: &'static [&'static str],
}

/// The layout of `architecture`: vision-language checkpoints nest the text model and carry a
/// vision tower; both carry the multi-token-prediction head transformers also drops.
pub fn layout(architecture: &str) -> Layout {
    // `mtp.*`: the multi-token-prediction layer (a draft head; plumb does not draft with it yet).
    // `model.visual.*`: the vision tower of the vision-language checkpoints (text-only serving).
    match architecture.ends_with("ForConditionalGeneration") {
        true => Layout { prefix: "model.language_model", ignored: &["mtp.*", "model.visual.*"] },
        false => Layout { prefix: "model", ignored: &["mtp.*"] },
    }
}

/// The hybrid settings of a checkpoint's config.json (the text config of a vision-language one).
pub fn hybrid_config(checkpoint: CheckpointRef<'_>, config: &ModelConfig) -> Result<HybridConfig, ModelError> {
    let json = checkpoint.config_json().ok_or(ModelError::Unsupported("hybrid families from GGUF files"))?;
    let file = checkpoint.path().join("config.json").display().to_string();
    let json = match json.get("text_config") {
        Some(Value::Object(text)) => text,
        _ => json,
    };
    HybridConfig::from_hf(json, config.num_hidden_layers, &file)
}

/// The text model's part of config.json (`text_config` in vision-language checkpoints) and the
/// file's path for errors.
pub fn text_config_json<'a, B: Backend>(
    w: &WeightLoader<'a, B>,
) -> Result<(&'a Map<String, Value>, String), ModelError> {
    let json = w.checkpoint.config_json().ok_or(ModelError::Unsupported("hybrid families from GGUF files"))?;
    let file = w.checkpoint.path().join("config.json").display().to_string();
    match json.get("text_config") {
        Some(Value::Object(text)) => Ok((text, file)),
        _ => Ok((json, file)),
    }
}

/// The common preamble of the hybrid families: refuses what they do not implement, reads the
/// hybrid settings and the head.
pub fn load_common<B: FullBackend>(
    w: &WeightLoader<'_, B>,
    config: &ModelConfig,
) -> Result<(HybridConfig, Option<B::Weight>), ModelError> {
    if config.rope_scaling.is_some() {
        return Err(ModelError::Unsupported("RoPE scaling in the hybrid linear-attention families"));
    }
    let hybrid = hybrid_config(w.checkpoint, config)?;
    let c = config;
    // A tied checkpoint that also stores `lm_head.weight` is refused by `finish`.
    let lm_head = match c.tie_word_embeddings {
        true => None,
        false => Some(w.load_shaped("lm_head.weight", c.vocab_size, c.hidden_size)?),
    };
    Ok((hybrid, lm_head))
}

/// A loaded Qwen3.5 dense model.
#[derive(Debug)]
pub struct Qwen3_5<B: Backend> {
    decoder: HybridDecoder<B>,
}

impl<B: FullBackend> Qwen3_5<B> {
    pub fn load(w: &WeightLoader<'_, B>, config: ModelConfig) -> Result<Self, ModelError> {
        let (hybrid, lm_head) = load_common(w, &config)?;
        let (c, spec, layout) = (&config, hybrid.gdn, layout(&config.architecture));
        let eps = c.rms_norm_eps;
        let linear = |prefix: &str, state_layer: usize| {
            let proj = GatedDeltaNet::load_projections(w, prefix, &spec, c.hidden_size)?;
            GatedDeltaNet::load(w, prefix, spec, proj, c.hidden_size, eps, state_layer)
        };
        let mlp = |_: usize, prefix: &str| FeedForward::dense(w, prefix, c);
        let loaders = LayerLoaders { linear: &linear, mlp: &mlp };
        let decoder = HybridDecoder::load(
            w,
            layout.prefix,
            config.clone(),
            spec,
            &hybrid.is_linear,
            loaders,
            lm_head,
            rope::inv_freq(c),
        )?;
        w.finish(layout.ignored)?;
        Ok(Qwen3_5 { decoder })
    }
}

impl<B: FullBackend> CausalLm<B> for Qwen3_5<B> {
    fn config(&self) -> &ModelConfig {
        &self.decoder.config
    }

    fn kv_spec_for_lanes(&self, block_size: usize, num_blocks: usize, num_lanes: usize) -> KvSpec {
        self.decoder.kv_spec_for_lanes(block_size, num_blocks, num_lanes)
    }

    fn lane_state_snapshots(&self) -> bool {
        self.decoder.lane_state_snapshots()
    }

    fn forward(&self, b: &B, batch: &ForwardBatch, kv: &mut B::KvCache, trace: Option<Trace<'_, B>>) -> B::Tensor {
        self.decoder.forward(b, batch, kv, trace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = r#"{"layer_types": ["linear_attention", "full_attention", "linear_attention"],
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 8,
        "linear_num_key_heads": 2, "linear_num_value_heads": 6}"#;

    fn with(edit: impl FnOnce(&mut Map<String, Value>)) -> Result<HybridConfig, ModelError> {
        let Value::Object(mut m) = serde_json::from_str(HYBRID).unwrap() else { unreachable!() };
        edit(&mut m);
        HybridConfig::from_hf(&m, 3, "config.json")
    }

    #[test]
    fn reads_layer_types_heads_and_the_lane_state_they_need() {
        let c = with(|_| {}).unwrap();
        assert_eq!(c.is_linear, [true, false, true]);
        let h = c.gdn.heads;
        assert_eq!((h.qkv_cols(), h.state_floats()), (2 * 2 * 16 + 6 * 8, 6 * 16 * 8));
        let s = c.gdn.lane_state(2, 5);
        assert_eq!((s.conv_floats, s.recurrent_floats, s.num_slots), (3 * 112, 768, 5));
        // Without layer_types, every `full_attention_interval`-th layer is full (transformers).
        let c = with(|m| {
            m.remove("layer_types");
            m.insert("full_attention_interval".into(), 3.into());
        })
        .unwrap();
        assert_eq!(c.is_linear, [true, true, false]);
    }

    #[test]
    fn refuses_what_it_cannot_run() {
        type Edit = Box<dyn FnOnce(&mut Map<String, Value>)>;
        let cases: Vec<(Edit, &str)> = vec![
            (Box::new(|m| drop(m.insert("layer_types".into(), serde_json::json!(["linear_attention"])))), "1 entries"),
            (
                Box::new(|m| drop(m.insert("layer_types".into(), serde_json::json!(["a", "b", "sliding_attention"])))),
                "holds `a`",
            ),
            (
                Box::new(|m| drop(m.insert("linear_num_value_heads".into(), 5.into()))),
                "multiple of linear_num_key_heads",
            ),
            (Box::new(|m| drop(m.insert("linear_conv_kernel_dim".into(), 1.into()))), "at least 2 taps"),
            (Box::new(|m| drop(m.insert("linear_key_head_dim".into(), 0.into()))), "positive integer"),
        ];
        for (edit, want) in cases {
            let err = with(edit).unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} should contain {want:?}");
        }
    }
}
