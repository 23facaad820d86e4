//! plumb-models: model graphs written once against the `Backend` op groups.
//! `layers/` holds the shared building blocks, `families/` one file per family, and `registry`
//! maps a Hugging Face architecture name to a loader. A family never knows the backend, the
//! weight format or the KV strategy; it sees a `ForwardBatch` and a KV cache handle.
#![forbid(unsafe_code)]

pub mod families;
pub mod layers;
pub mod registry;

use plumb_checkpoint::ModelConfig;
use plumb_core::{Backend, ForwardBatch, KvSpec, LaneStateSpec};

pub use registry::{ModelError, load_model, load_model_with};

/// Receives named intermediates (`"attn_norm"`, layer 3, tensor) for comparison with a reference.
pub type Trace<'a, B> = &'a mut dyn FnMut(&str, Option<usize>, &<B as Backend>::Tensor);

/// A causal language model on backend `B`.
pub trait CausalLm<B: Backend>: Send + Sync {
    fn config(&self) -> &ModelConfig;
    /// The KV geometry this model needs for `num_blocks` blocks of `block_size` positions, and
    /// one lane-state slot where the model has lane state.
    fn kv_spec(&self, block_size: usize, num_blocks: usize) -> KvSpec {
        self.kv_spec_for_lanes(block_size, num_blocks, 1)
    }
    /// [`CausalLm::kv_spec`] with `num_lanes` lane-state slots (batches then name slots
    /// `0..num_lanes` in `ForwardBatch::state_slots`). Attention-only models have no lane state.
    fn kv_spec_for_lanes(&self, block_size: usize, num_blocks: usize, num_lanes: usize) -> KvSpec {
        let _ = num_lanes;
        let c = self.config();
        KvSpec {
            num_layers: c.num_hidden_layers,
            num_kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
            block_size,
            num_blocks,
            lane_state: LaneStateSpec::NONE,
        }
    }
    /// Whether the prefix cache may resume this model from snapshots of its lane state: its
    /// state after n tokens is the same bits however the n tokens were split into steps (a
    /// canonical recurrence), and every state layer keeps its state in the lane-state slots the
    /// backend snapshots (`ForwardBatch::state_snapshots`). A model with lane state that does
    /// not declare it runs with the prefix cache off; attention-only models need no snapshots.
    fn lane_state_snapshots(&self) -> bool {
        false
    }
    /// One step: writes every row's K/V into `kv` and returns logits [batch.logits_rows.len(), vocab].
    fn forward(&self, backend: &B, batch: &ForwardBatch, kv: &mut B::KvCache, trace: Option<Trace<'_, B>>)
    -> B::Tensor;
}
