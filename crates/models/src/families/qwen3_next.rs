//! The Qwen3-Next family (`Qwen3NextForCausalLM`): Qwen3.5-MoE's hybrid decoder with Qwen3-Next's
//! storage and options — the Gated DeltaNet projections fused per key head (`in_proj_qkvz`,
//! `in_proj_ba`, regrouped at load by `GatedDeltaNet::load_fused_projections`), experts stored one
//! SwiGLU each, `norm_topk_prob` (default true), and `decoder_sparse_step` / `mlp_only_layers`,
//! which can make a layer's feed-forward block a dense SwiGLU of `intermediate_size` instead of
//! the mixture of experts with its sigmoid-gated shared expert.

use crate::families::qwen3_5::{layout, load_common, text_config_json};
use crate::families::qwen3_5_moe::SharedMoeConfig;
use crate::layers::decoder::FeedForward;
use crate::layers::gated_delta::GatedDeltaNet;
use crate::layers::hybrid::{HybridDecoder, LayerLoaders};
use crate::layers::moe::{ExpertLayout, Moe};
use crate::layers::{loader::WeightLoader, rope};
use crate::registry::ModelError;
use crate::{CausalLm, Trace};
use plumb_checkpoint::ModelConfig;
use plumb_core::{Backend, ForwardBatch, FullBackend, KvSpec};

/// A loaded Qwen3-Next model.
#[derive(Debug)]
pub struct Qwen3Next<B: Backend> {
    decoder: HybridDecoder<B>,
    pub experts: SharedMoeConfig,
}

impl<B: FullBackend> Qwen3Next<B> {
    pub fn load(w: &WeightLoader<'_, B>, config: ModelConfig) -> Result<Self, ModelError> {
        let (hybrid, lm_head) = load_common(w, &config)?;
        let (json, file) = text_config_json(w)?;
        let experts = SharedMoeConfig::from_hf(json, config.num_hidden_layers, &file, true)?;
        let (c, spec, layout) = (&config, hybrid.gdn, layout(&config.architecture));
        let eps = c.rms_norm_eps;
        let linear = |prefix: &str, state_layer: usize| {
            let proj = GatedDeltaNet::load_fused_projections(w, prefix, &spec, c.hidden_size)?;
            GatedDeltaNet::load(w, prefix, spec, proj, c.hidden_size, eps, state_layer)
        };
        let (moe, shared) = (experts.moe.spec(), Some(experts.shared_expert_intermediate_size));
        let mlp = |i: usize, prefix: &str| match experts.moe.is_sparse(i) {
            true => {
                Ok(FeedForward::Moe(Moe::load_with(w, prefix, c.hidden_size, moe, ExpertLayout::PerExpert, shared)?))
            }
            false => FeedForward::dense(w, prefix, c),
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
        Ok(Qwen3Next { decoder, experts })
    }
}

impl<B: FullBackend> CausalLm<B> for Qwen3Next<B> {
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
