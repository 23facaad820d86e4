//! plumb-core: the vocabulary every other crate shares — element types, quantized block formats
//! with exact dequantization, and (later) the `Backend` op groups and `ForwardBatch`.
//! No I/O lives here; everything is a pure function of its inputs.
#![forbid(unsafe_code)]

pub mod backend;
pub mod batch;
pub mod bytes;
pub mod dtype;
pub mod lane_state;
pub mod logprobs;
pub mod pick;
pub mod q8;
pub mod quant;

pub use backend::{
    AttentionOps, Backend, BackendError, COMPRESSED_ATTENTION_OPS, CompressedAttentionOps, Compression, ElementwiseOps,
    ExpertRow, FullBackend, GATED_DELTA_OPS, GatedDeltaOps, GdnHeads, HYPER_CONNECTION_OPS, HcSpec, HyperConnectionOps,
    KvStore, LANE_STATE_OPS, LaneStateOps, LinearInputs, LinearOps, MOE_OPS, MoeOps, OPS, PagedSegment, RopeOps,
    SCORED_MOE_OPS, ScoredMoeOps, Shape, WeightSource, linear_add_apart, linear_add_norm_apart, norm_apart,
    norm_linear_apart, paged_segments, swiglu_apart,
};
pub use batch::{ForwardBatch, KvSpec, LaneStateSpec, LaneView, StateSnapshot};
pub use bytes::HostBytes;
pub use dtype::{GgmlType, TypeInfo};
pub use lane_state::{LaneRun, LaneStateStore, StatePart, lane_runs};
pub use logprobs::{LogprobRow, MAX_LOGPROBS, TokenLogprobs};
pub use pick::{LogitEdit, Penalties, Pick, PickRow, Picked};
pub use quant::{QuantError, dequantize};
