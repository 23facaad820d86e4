//! One file per model family.

pub mod deepseek_v4;
pub mod llama;
pub mod qwen3;
pub mod qwen3_5;
pub mod qwen3_5_moe;
pub mod qwen3_moe;
pub mod qwen3_next;
