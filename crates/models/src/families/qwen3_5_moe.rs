//! The Qwen3.5 / 3.6 MoE family (`Qwen3_5MoeForCausalLM`, and the text model of the
//! vision-language `Qwen3_5MoeForConditionalGeneration`): Qwen3.5's hybrid decoder (Gated
//! DeltaNet and gated full attention as `layer_types` says, zero-centred norms, partial RoPE)
//! whose every feed-forward block is a mixture of SwiGLU experts — softmax router, top-k, always
//! renormalized — plus a sigmoid-gated shared expert. Experts are read one SwiGLU each (as
//! transformers saves them) or fused (`experts.gate_up_proj`, `experts.down_proj`, as its modules
//! hold them), whichever the checkpoint has. The experts' settings are read here; the hybrid ones
//! by `qwen3_5`.

use crate::families::qwen3_5::{layout, load_common, text_config_json};
use crate::families::qwen3_moe::Qwen3MoeConfig;
use crate::layers::decoder::FeedForward;
use crate::layers::gated_delta::GatedDeltaNet;
use crate::layers::hybrid::{HybridDecoder, LayerLoaders};
use crate::layers::moe::{ExpertLayout, Moe};
use crate::layers::{loader::WeightLoader, rope};
use crate::registry::ModelError;
use crate::{CausalLm, Trace};
use plumb_checkpoint::{CheckpointError, ModelConfig};
use plumb_core::{Backend, ForwardBatch, FullBackend, KvSpec};
use serde_json::{Map, Value};

/// The experts of a hybrid MoE config.json: Qwen3-MoE's keys plus the shared expert's width.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedMoeConfig {
    pub moe: Qwen3MoeConfig,
    pub shared_expert_intermediate_size: usize,
}

impl SharedMoeConfig {
    /// Reads the expert keys (`file` names the config in errors). `norm_topk_prob_default` is
    /// what an absent `norm_topk_prob` means for the architecture.
    pub fn from_hf(
        m: &Map<String, Value>,
        num_hidden_layers: usize,
        file: &str,
        norm_topk_prob_default: bool,
    ) -> Result<Self, ModelError> {
        let bad = |key: &str, why: String| {
            ModelError::Checkpoint(CheckpointError::BadConfig { file: file.into(), key: key.into(), why })
        };
        let mut moe = Qwen3MoeConfig::from_hf(m, num_hidden_layers, file)?;
        if m.get("norm_topk_prob").is_none_or(Value::is_null) {
            moe.norm_topk_prob = norm_topk_prob_default;
        }
        let key = "shared_expert_intermediate_size";
        let shared = match m.get(key).filter(|v| !v.is_null()) {
            None => return Err(bad(key, "is missing".into())),
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .filter(|&x| x > 0)
                .ok_or_else(|| bad(key, format!("is {v}, expected a positive integer")))?,
        };
        Ok(SharedMoeConfig { moe, shared_expert_intermediate_size: shared })
    }
}

/// A loaded Qwen3.5-MoE model.
#[derive(Debug)]
pub struct Qwen3_5Moe<B: Backend> {
    decoder: HybridDecoder<B>,
    pub experts: SharedMoeConfig,
}

impl<B: FullBackend> Qwen3_5Moe<B> {
    pub fn load(w: &WeightLoader<'_, B>, config: ModelConfig) -> Result<Self, ModelError> {
        let (hybrid, lm_head) = load_common(w, &config)?;
        let (json, file) = text_config_json(w)?;
        // transformers' Qwen3.5-MoE router always renormalizes its top-k weights.
        let experts = SharedMoeConfig::from_hf(json, config.num_hidden_layers, &file, true)?;
        if experts.moe.num_experts == 0 {
            let why = "is 0; every Qwen3.5-MoE layer is a mixture of experts".into();
            let err = CheckpointError::BadConfig { file, key: "num_experts".into(), why };
            return Err(ModelError::Checkpoint(err));
        }
        let (c, spec, layout) = (&config, hybrid.gdn, layout(&config.architecture));
        let eps = c.rms_norm_eps;
        let linear = |prefix: &str, state_layer: usize| {
            let proj = GatedDeltaNet::load_projections(w, prefix, &spec, c.hidden_size)?;
            GatedDeltaNet::load(w, prefix, spec, proj, c.hidden_size, eps, state_layer)
        };
        let (moe, shared) = (experts.moe.spec(), Some(experts.shared_expert_intermediate_size));
        let mlp = |_: usize, prefix: &str| {
            let fused = w.has(&format!("{prefix}.experts.gate_up_proj"));
            let experts = if fused { ExpertLayout::Fused } else { ExpertLayout::PerExpert };
            Ok(FeedForward::Moe(Moe::load_with(w, prefix, c.hidden_size, moe, experts, shared)?))
        };
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
        Ok(Qwen3_5Moe { decoder, experts })
    }
}

impl<B: FullBackend> CausalLm<B> for Qwen3_5Moe<B> {
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

    const EXPERTS: &str = r#"{"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 24}"#;

    fn with(edit: impl FnOnce(&mut Map<String, Value>), default: bool) -> Result<SharedMoeConfig, ModelError> {
        let Value::Object(mut m) = serde_json::from_str(EXPERTS).unwrap() else { unreachable!() };
        edit(&mut m);
        SharedMoeConfig::from_hf(&m, 4, "config.json", default)
    }

    #[test]
    fn reads_the_shared_expert_and_the_architectures_renormalization_default() {
        let c = with(|_| {}, true).unwrap();
        assert_eq!((c.moe.num_experts, c.moe.norm_topk_prob, c.shared_expert_intermediate_size), (8, true, 24));
        assert!((0..4).all(|i| c.moe.is_sparse(i)));
        let c = with(|m| drop(m.insert("norm_topk_prob".into(), false.into())), true).unwrap();
        assert!(!c.moe.norm_topk_prob, "a set value wins over the default");
    }

    #[test]
    fn refuses_a_missing_or_zero_shared_expert() {
        let err = with(|m| drop(m.remove("shared_expert_intermediate_size")), true).unwrap_err().to_string();
        assert!(err.contains("`shared_expert_intermediate_size` is missing"), "{err}");
        let err =
            with(|m| drop(m.insert("shared_expert_intermediate_size".into(), 0.into())), true).unwrap_err().to_string();
        assert!(err.contains("expected a positive integer"), "{err}");
    }
}
