//! Shared layers. Each takes its weights by Hugging Face name through a `WeightLoader`.

pub mod attention;
pub mod decoder;
pub mod loader;
pub mod mlp;
pub mod moe;
pub mod rope;
