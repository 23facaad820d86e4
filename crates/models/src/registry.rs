//! Architecture name → family loader. Adding a family is one file plus one line here.

use crate::CausalLm;
use crate::families::llama::Llama;
use crate::layers::loader::WeightLoader;
use plumb_checkpoint::{CheckpointError, GgufFile, ModelConfig};
use plumb_core::{BackendError, FullBackend};

/// Why a model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("architecture `{0}` is not supported (plumb runs: {SUPPORTED})")]
    UnsupportedArchitecture(String),
    #[error("tensor `{0}` is missing from the checkpoint")]
    MissingTensor(String),
    #[error("tensor `{name}` has shape {actual:?}, expected {expected:?}")]
    WrongShape { name: String, expected: (usize, usize), actual: (usize, usize) },
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Hugging Face architectures with a family.
pub const SUPPORTED: &str = "LlamaForCausalLM, MistralForCausalLM";

/// The family name a Hugging Face architecture belongs to, if any.
pub fn family_of(architecture: &str) -> Option<&'static str> {
    match architecture {
        "LlamaForCausalLM" | "MistralForCausalLM" => Some("llama"),
        _ => None,
    }
}

/// Loads the model in `file` onto `backend`.
pub fn load_model<B: FullBackend + 'static>(file: &GgufFile, backend: &B) -> Result<Box<dyn CausalLm<B>>, ModelError> {
    let config = ModelConfig::from_gguf(file)?;
    let loader = WeightLoader { file, backend };
    match family_of(&config.architecture) {
        Some("llama") => Ok(Box::new(Llama::load(&loader, config)?)),
        _ => Err(ModelError::UnsupportedArchitecture(config.architecture)),
    }
}
