//! One file per model family.

pub mod llama;
pub mod qwen3;
