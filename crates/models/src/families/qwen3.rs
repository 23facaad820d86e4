//! The Qwen3 family (Qwen3ForCausalLM, dense): Llama's pre-norm decoder of grouped-query attention
//! and SwiGLU, plus a per-head RMSNorm of q and k (`q_norm`, `k_norm`) before RoPE, no attention
//! bias, and an output head that is tied or not as `tie_word_embeddings` says.
//! RoPE pairs dimensions rotate-half style: Hugging Face stores Q/K that way and llama.cpp's
//! converter leaves Qwen3 unpermuted, so both sources carry `RopeLayout::RotateHalf`.

use crate::layers::decoder::{Decoder, FeedForward};
use crate::layers::{attention::Attention, loader::WeightLoader, rope};
use crate::registry::ModelError;
use crate::{CausalLm, Trace};
use plumb_checkpoint::ModelConfig;
use plumb_checkpoint::hparams::RopeScaling;
use plumb_core::{Backend, ForwardBatch, FullBackend};

/// A loaded Qwen3 model.
#[derive(Debug)]
pub struct Qwen3<B: Backend>(Decoder<B>);

impl<B: FullBackend> Qwen3<B> {
    pub fn load(w: &WeightLoader<'_, B>, config: ModelConfig) -> Result<Self, ModelError> {
        if matches!(config.rope_scaling, Some(RopeScaling::Yarn { .. })) {
            return Err(ModelError::Unsupported("YaRN RoPE scaling"));
        }
        let c = &config;
        // A tied checkpoint that also stores `lm_head.weight` is refused by `finish` below.
        let lm_head = match c.tie_word_embeddings {
            true => None,
            false => Some(w.load_shaped("lm_head.weight", c.vocab_size, c.hidden_size)?),
        };
        let attention = |prefix: &str| Attention::load(w, prefix, c)?.with_qk_norm(w, prefix);
        let decoder = Decoder::load(
            w,
            config.clone(),
            attention,
            |_, p| FeedForward::dense(w, p, c),
            lm_head,
            rope::inv_freq(c),
        )?;
        w.finish(&[])?;
        Ok(Qwen3(decoder))
    }
}

impl<B: FullBackend> CausalLm<B> for Qwen3<B> {
    fn config(&self) -> &ModelConfig {
        &self.0.config
    }

    fn forward(&self, b: &B, batch: &ForwardBatch, kv: &mut B::KvCache, trace: Option<Trace<'_, B>>) -> B::Tensor {
        self.0.forward(b, batch, kv, trace)
    }
}
