//! The Llama family (also Mistral-style and SmolLM checkpoints): pre-norm decoder layers of
//! grouped-query attention and SwiGLU, RMSNorm, RoPE, tied or separate output embeddings.
//! GGUF Llama checkpoints store Q/K rows permuted so RoPE rotates adjacent pairs — which is what
//! the backend's `rope` does.

use crate::layers::decoder::{Decoder, FeedForward};
use crate::layers::{attention::Attention, loader::WeightLoader, rope};
use crate::registry::ModelError;
use crate::{CausalLm, Trace};
use plumb_checkpoint::ModelConfig;
use plumb_core::{Backend, ForwardBatch, FullBackend};

/// Llama-3 RoPE scaling as GGUF carries it: per-frequency divisors.
const ROPE_FREQS: &str = "model.rope_freqs.weight";

/// Tensors a Llama checkpoint may hold that the graph rightly does not read.
const IGNORED: &[&str] = &[
    // Old checkpoints (and GGUF `attn_rot_embd`) stored RoPE's inverse frequencies; they follow
    // from rope_theta and rope_dim, which the graph uses (llama.cpp ignores them too).
    "model.layers.*.self_attn.rotary_emb.inv_freq",
];

/// A loaded Llama-family model.
#[derive(Debug)]
pub struct Llama<B: Backend>(Decoder<B>);

impl<B: FullBackend> Llama<B> {
    pub fn load(w: &WeightLoader<'_, B>, config: ModelConfig) -> Result<Self, ModelError> {
        if matches!(config.rope_scaling, Some(plumb_checkpoint::hparams::RopeScaling::Yarn { .. })) {
            return Err(ModelError::Unsupported("YaRN RoPE scaling"));
        }
        let c = &config;
        let lm_head = match w.has("lm_head.weight") {
            true => Some(w.load_shaped("lm_head.weight", c.vocab_size, c.hidden_size)?),
            false => None,
        };
        let mut inv_freq = rope::inv_freq(c);
        if w.has(ROPE_FREQS) {
            rope::apply_freq_factors(&mut inv_freq, &w.load_host(ROPE_FREQS)?, c)?;
        }
        let attention = |prefix: &str| Attention::load(w, prefix, c);
        let decoder =
            Decoder::load(w, config.clone(), attention, |_, p| FeedForward::dense(w, p, c), lm_head, inv_freq)?;
        w.finish(IGNORED)?;
        Ok(Llama(decoder))
    }
}

impl<B: FullBackend> CausalLm<B> for Llama<B> {
    fn config(&self) -> &ModelConfig {
        &self.0.config
    }

    fn forward(&self, b: &B, batch: &ForwardBatch, kv: &mut B::KvCache, trace: Option<Trace<'_, B>>) -> B::Tensor {
        self.0.forward(b, batch, kv, trace)
    }
}
