//! plumb-models: model graphs written once against the `Backend` op groups.
//! `layers/` holds the shared building blocks, `families/` one file per family, and `registry`
//! maps a Hugging Face architecture name to a loader. A family never knows the backend, the
//! weight format or the KV strategy; it sees a `ForwardBatch` and a KV cache handle.
#![forbid(unsafe_code)]

pub mod families;
pub mod layers;
pub mod registry;

use plumb_checkpoint::ModelConfig;
use plumb_core::{Backend, ForwardBatch, KvSpec};

pub use registry::{ModelError, load_model, load_model_with};

/// Receives named intermediates (`"attn_norm"`, layer 3, tensor) for comparison with a reference.
pub type Trace<'a, B> = &'a mut dyn FnMut(&str, Option<usize>, &<B as Backend>::Tensor);

/// A causal language model on backend `B`.
pub trait CausalLm<B: Backend>: Send + Sync {
    fn config(&self) -> &ModelConfig;
    /// The KV geometry this model needs for `num_blocks` blocks of `block_size` positions.
    fn kv_spec(&self, block_size: usize, num_blocks: usize) -> KvSpec {
        let c = self.config();
        KvSpec {
            num_layers: c.num_hidden_layers,
            num_kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
            block_size,
            num_blocks,
        }
    }
    /// One step: writes every row's K/V into `kv` and returns logits [batch.logits_rows.len(), vocab].
    fn forward(&self, backend: &B, batch: &ForwardBatch, kv: &mut B::KvCache, trace: Option<Trace<'_, B>>)
    -> B::Tensor;
}
