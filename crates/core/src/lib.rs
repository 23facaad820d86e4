//! plumb-core: the vocabulary every other crate shares — element types, quantized block formats
//! with exact dequantization, and (later) the `Backend` op groups and `ForwardBatch`.
//! No I/O lives here; everything is a pure function of its inputs.
#![forbid(unsafe_code)]

pub mod dtype;
pub mod quant;

pub use dtype::{GgmlType, TypeInfo};
pub use quant::{QuantError, dequantize};
