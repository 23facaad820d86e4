//! plumb-checkpoint: turns files on disk into metadata, tensor views and model hyper-parameters.
//! It reads GGUF and Hugging Face safetensors over a memory map (nothing is copied until a backend asks), validates every offset
//! and size before use, owns the one GGUF↔Hugging Face tensor-name table, resolves and fetches
//! model sources (`plumb pull`), and writes random-weight Hugging Face folders (`plumb synth`).
//! It knows no tensor math beyond block geometry.

pub mod error;
pub mod gguf;
pub mod hf;
pub mod hf_config;
pub mod hparams;
pub mod safetensors;
pub mod source;
pub mod synth;
pub mod tensor_names;

pub use error::CheckpointError;
pub use gguf::{GgufFile, MetaValue, TensorInfo};
pub use hf::{Checkpoint, CheckpointRef, HfCheckpoint, WeightView};
pub use hparams::{ModelConfig, RopeLayout};
pub use safetensors::{SafetensorsFile, SafetensorsModel, StDtype, StTensorInfo};
