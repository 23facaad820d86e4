//! plumb-core: the vocabulary every other crate shares — element types, quantized block formats
//! with exact dequantization, and (later) the `Backend` op groups and `ForwardBatch`.
//! No I/O lives here; everything is a pure function of its inputs.
#![forbid(unsafe_code)]

pub mod backend;
pub mod batch;
pub mod bytes;
pub mod dtype;
pub mod quant;

pub use backend::{
    AttentionOps, Backend, BackendError, ElementwiseOps, ExpertRow, FullBackend, LinearInputs, LinearOps, MOE_OPS,
    MoeOps, OPS, RopeOps, Shape, WeightSource,
};
pub use batch::{ForwardBatch, KvSpec, LaneView};
pub use bytes::HostBytes;
pub use dtype::{GgmlType, TypeInfo};
pub use quant::{QuantError, dequantize};
