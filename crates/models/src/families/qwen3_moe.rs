//! The Qwen3-MoE family (Qwen3MoeForCausalLM: Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's decoder
//! (per-head QK RMSNorm before rotate-half RoPE, tied or untied head) whose feed-forward block is
//! a mixture of SwiGLU experts — softmax router, top-k, optionally renormalized, no shared
//! expert — in every layer that `decoder_sparse_step` and `mlp_only_layers` make sparse, and a
//! dense SwiGLU of `intermediate_size` in the others. The experts' settings are this family's own
//! part of config.json, read here; `ModelConfig` holds what it shares with every family.

use crate::layers::decoder::{Decoder, FeedForward};
use crate::layers::moe::{Moe, MoeSpec};
use crate::layers::{attention::Attention, loader::WeightLoader, rope};
use crate::registry::ModelError;
use crate::{CausalLm, Trace};
use plumb_checkpoint::hparams::RopeScaling;
use plumb_checkpoint::{CheckpointError, CheckpointRef, GgufFile, ModelConfig};
use plumb_core::{Backend, ForwardBatch, FullBackend};
use serde_json::{Map, Value};

/// The experts' settings of a Qwen3-MoE config.json.
#[derive(Clone, Debug, PartialEq)]
pub struct Qwen3MoeConfig {
    /// 0 makes every layer dense, as in transformers.
    pub num_experts: usize,
    pub num_experts_per_tok: usize,
    pub moe_intermediate_size: usize,
    pub norm_topk_prob: bool,
    /// Layer i is sparse when (i + 1) is a multiple of it (and i is not in `mlp_only_layers`).
    pub decoder_sparse_step: usize,
    pub mlp_only_layers: Vec<usize>,
}

impl Qwen3MoeConfig {
    /// Reads and checks the expert keys of `config.json` (`file` names it in errors). Absent
    /// optional keys take transformers' defaults; the sizes have no sound default and must be set.
    pub fn from_hf(m: &Map<String, Value>, num_hidden_layers: usize, file: &str) -> Result<Self, ModelError> {
        let bad = |key: &str, why: String| {
            ModelError::Checkpoint(CheckpointError::BadConfig { file: file.into(), key: key.into(), why })
        };
        let size = |key: &str| match m.get(key).filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| bad(key, format!("is {v}, expected a non-negative integer"))),
        };
        let required = |key: &str| size(key)?.ok_or_else(|| bad(key, "is missing".into()));
        // transformers writes `num_local_experts` (its attribute map); Qwen's own files `num_experts`.
        let num_experts = match (size("num_experts")?, size("num_local_experts")?) {
            (Some(a), Some(b)) if a != b => {
                return Err(bad("num_local_experts", format!("is {b}, but num_experts is {a}")));
            }
            (Some(n), _) | (None, Some(n)) => n,
            (None, None) => return Err(bad("num_experts", "is missing".into())),
        };
        let norm_topk_prob = match m.get("norm_topk_prob").filter(|v| !v.is_null()) {
            None => false,
            Some(v) => v.as_bool().ok_or_else(|| bad("norm_topk_prob", format!("is {v}, expected true or false")))?,
        };
        let mlp_only_layers: Vec<usize> = match m.get("mlp_only_layers").filter(|v| !v.is_null()) {
            None => Vec::new(),
            Some(v) => v
                .as_array()
                .and_then(|a| a.iter().map(|x| x.as_u64().and_then(|x| usize::try_from(x).ok())).collect())
                .ok_or_else(|| bad("mlp_only_layers", format!("is {v}, expected a list of layer indices")))?,
        };
        let c = Qwen3MoeConfig {
            num_experts,
            num_experts_per_tok: required("num_experts_per_tok")?,
            moe_intermediate_size: required("moe_intermediate_size")?,
            norm_topk_prob,
            decoder_sparse_step: size("decoder_sparse_step")?.unwrap_or(1),
            mlp_only_layers,
        };
        if c.decoder_sparse_step == 0 {
            return Err(bad("decoder_sparse_step", "is 0; it must be at least 1 (1 makes every layer sparse)".into()));
        }
        if let Some(&l) = c.mlp_only_layers.iter().find(|&&l| l >= num_hidden_layers) {
            return Err(bad(
                "mlp_only_layers",
                format!("names layer {l}, but the model has {num_hidden_layers} layers"),
            ));
        }
        if let Some((i, &l)) = c.mlp_only_layers.iter().enumerate().find(|(i, l)| c.mlp_only_layers[..*i].contains(l)) {
            return Err(bad("mlp_only_layers", format!("names layer {l} twice (again at position {i})")));
        }
        if c.num_experts > 0 {
            if !(1..=c.num_experts).contains(&c.num_experts_per_tok) {
                let why =
                    format!("is {}; it must be between 1 and num_experts = {}", c.num_experts_per_tok, c.num_experts);
                return Err(bad("num_experts_per_tok", why));
            }
            if c.moe_intermediate_size == 0 {
                return Err(bad("moe_intermediate_size", "is 0; experts need at least one hidden unit".into()));
            }
        }
        Ok(c)
    }

    /// Reads the experts' settings from GGUF metadata (`qwen3moe.expert_*`). llama.cpp's converter
    /// writes no `norm_topk_prob`, `decoder_sparse_step` or `mlp_only_layers`: its qwen3moe graph
    /// always renormalizes the top-k weights, and a layer is sparse when it has a router
    /// (`is_sparse_layer`), which also covers checkpoints whose converter kept dense layers.
    pub fn from_gguf(
        f: &GgufFile,
        num_hidden_layers: usize,
        is_sparse_layer: impl Fn(usize) -> bool,
    ) -> Result<Self, ModelError> {
        let arch = f.get_str("general.architecture")?;
        let size = |k: &str| f.get_u64(&format!("{arch}.{k}")).map(|v| v as usize);
        let c = Qwen3MoeConfig {
            num_experts: size("expert_count")?,
            num_experts_per_tok: size("expert_used_count")?,
            moe_intermediate_size: size("expert_feed_forward_length")?,
            norm_topk_prob: true,
            decoder_sparse_step: 1,
            mlp_only_layers: (0..num_hidden_layers).filter(|&i| !is_sparse_layer(i)).collect(),
        };
        let bad = |key: &str, why: String| {
            ModelError::Checkpoint(CheckpointError::BadMetadataValue { key: format!("{arch}.{key}"), why })
        };
        if c.num_experts == 0 {
            return Err(bad("expert_count", "is 0; a qwen3moe GGUF needs experts".into()));
        }
        if !(1..=c.num_experts).contains(&c.num_experts_per_tok) {
            let why =
                format!("is {}; it must be between 1 and expert_count = {}", c.num_experts_per_tok, c.num_experts);
            return Err(bad("expert_used_count", why));
        }
        if c.moe_intermediate_size == 0 {
            return Err(bad("expert_feed_forward_length", "is 0; experts need at least one hidden unit".into()));
        }
        Ok(c)
    }

    /// Whether layer `i` holds experts (transformers' rule in `Qwen3MoeDecoderLayer`).
    pub fn is_sparse(&self, i: usize) -> bool {
        !self.mlp_only_layers.contains(&i) && self.num_experts > 0 && (i + 1).is_multiple_of(self.decoder_sparse_step)
    }

    pub(crate) fn spec(&self) -> MoeSpec {
        MoeSpec {
            num_experts: self.num_experts,
            top_k: self.num_experts_per_tok,
            intermediate_size: self.moe_intermediate_size,
            norm_topk_prob: self.norm_topk_prob,
        }
    }
}

/// A loaded Qwen3-MoE model.
#[derive(Debug)]
pub struct Qwen3Moe<B: Backend> {
    decoder: Decoder<B>,
    pub moe: Qwen3MoeConfig,
}

impl<B: FullBackend> Qwen3Moe<B> {
    pub fn load(w: &WeightLoader<'_, B>, config: ModelConfig) -> Result<Self, ModelError> {
        if matches!(config.rope_scaling, Some(RopeScaling::Yarn { .. })) {
            return Err(ModelError::Unsupported("YaRN RoPE scaling"));
        }
        let moe = match w.checkpoint {
            CheckpointRef::Gguf(f) => Qwen3MoeConfig::from_gguf(f, config.num_hidden_layers, |i| {
                w.has(&format!("model.layers.{i}.mlp.gate.weight"))
            })?,
            CheckpointRef::Hf(_) => {
                let json = w.checkpoint.config_json().expect("a Hugging Face folder has a config.json");
                let file = w.checkpoint.path().join("config.json").display().to_string();
                Qwen3MoeConfig::from_hf(json, config.num_hidden_layers, &file)?
            }
        };
        let c = &config;
        // A tied checkpoint that also stores `lm_head.weight` is refused by `finish` below.
        let lm_head = match c.tie_word_embeddings {
            true => None,
            false => Some(w.load_shaped("lm_head.weight", c.vocab_size, c.hidden_size)?),
        };
        let attention = |prefix: &str| Attention::load(w, prefix, c)?.with_qk_norm(w, prefix);
        let mlp = |i: usize, prefix: &str| match moe.is_sparse(i) {
            true => Ok(FeedForward::Moe(Moe::load(w, prefix, c.hidden_size, moe.spec())?)),
            false => FeedForward::dense(w, prefix, c),
        };
        let decoder = Decoder::load(w, config.clone(), attention, mlp, lm_head, rope::inv_freq(c))?;
        w.finish(&[])?;
        Ok(Qwen3Moe { decoder, moe })
    }
}

impl<B: FullBackend> CausalLm<B> for Qwen3Moe<B> {
    fn config(&self) -> &ModelConfig {
        &self.decoder.config
    }

    fn forward(&self, b: &B, batch: &ForwardBatch, kv: &mut B::KvCache, trace: Option<Trace<'_, B>>) -> B::Tensor {
        self.decoder.forward(b, batch, kv, trace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPERTS: &str = r#"{"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
        "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [1]}"#;

    fn with(edit: impl FnOnce(&mut Map<String, Value>)) -> Result<Qwen3MoeConfig, ModelError> {
        let Value::Object(mut m) = serde_json::from_str(EXPERTS).unwrap() else { unreachable!() };
        edit(&mut m);
        Qwen3MoeConfig::from_hf(&m, 4, "config.json")
    }

    #[test]
    fn sparse_layers_follow_the_step_and_the_dense_list() {
        let c = with(|_| {}).unwrap();
        assert_eq!((0..4).map(|i| c.is_sparse(i)).collect::<Vec<_>>(), [true, false, true, true]);
        let c = with(|m| drop(m.insert("decoder_sparse_step".into(), 2.into()))).unwrap();
        assert_eq!((0..4).map(|i| c.is_sparse(i)).collect::<Vec<_>>(), [false, false, false, true]);
        let c = with(|m| drop(m.insert("num_experts".into(), 0.into()))).unwrap();
        assert!((0..4).all(|i| !c.is_sparse(i)), "no experts: every layer dense, as in transformers");
    }

    #[test]
    fn reads_transformers_num_local_experts_and_defaults() {
        let c = with(|m| {
            let n = m.remove("num_experts").unwrap();
            m.insert("num_local_experts".into(), n);
            for key in ["norm_topk_prob", "decoder_sparse_step", "mlp_only_layers"] {
                m.remove(key);
            }
        })
        .unwrap();
        assert_eq!((c.num_experts, c.norm_topk_prob, c.decoder_sparse_step), (8, false, 1));
        assert!(c.mlp_only_layers.is_empty());
    }

    #[test]
    fn refuses_contradictory_and_missing_values() {
        type Edit = Box<dyn FnOnce(&mut Map<String, Value>)>;
        let cases: Vec<(Edit, &str)> = vec![
            (Box::new(|m| drop(m.insert("num_local_experts".into(), 16.into()))), "is 16, but num_experts is 8"),
            (Box::new(|m| drop(m.remove("num_experts"))), "`num_experts` is missing"),
            (Box::new(|m| drop(m.remove("moe_intermediate_size"))), "`moe_intermediate_size` is missing"),
            (Box::new(|m| drop(m.insert("num_experts_per_tok".into(), 9.into()))), "between 1 and num_experts = 8"),
            (Box::new(|m| drop(m.insert("num_experts_per_tok".into(), 0.into()))), "between 1 and num_experts"),
            (Box::new(|m| drop(m.insert("decoder_sparse_step".into(), 0.into()))), "`decoder_sparse_step` is 0"),
            (Box::new(|m| drop(m.insert("mlp_only_layers".into(), serde_json::json!([4])))), "names layer 4, but"),
            (Box::new(|m| drop(m.insert("mlp_only_layers".into(), serde_json::json!([1, 1])))), "names layer 1 twice"),
            (
                Box::new(|m| drop(m.insert("mlp_only_layers".into(), serde_json::json!([-1])))),
                "a list of layer indices",
            ),
            (Box::new(|m| drop(m.insert("norm_topk_prob".into(), "yes".into()))), "expected true or false"),
            (Box::new(|m| drop(m.insert("moe_intermediate_size".into(), 0.into()))), "at least one hidden unit"),
        ];
        for (edit, want) in cases {
            let err = with(edit).unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} should contain {want:?}");
        }
    }
}
