//! Shared layers. Each takes its weights by Hugging Face name through a `WeightLoader`.

pub mod attention;
pub mod compressed_attention;
pub mod compressed_state;
pub mod decoder;
pub mod gated_attention;
pub mod gated_delta;
pub mod hybrid;
pub mod loader;
pub mod mlp;
pub mod moe;
pub mod residual;
pub mod rope;
pub mod scored_moe;
