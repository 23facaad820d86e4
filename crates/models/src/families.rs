//! One file per model family.

pub mod llama;
