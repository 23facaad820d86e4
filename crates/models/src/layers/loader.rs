//! Loading weights by Hugging Face name from a GGUF file onto a backend.
//! GGUF names are looked up through `plumb_checkpoint::tensor_names` — the only translation.

use crate::registry::ModelError;
use plumb_checkpoint::{GgufFile, tensor_names};
use plumb_core::{Backend, WeightSource};

/// Loads named weights of one checkpoint onto one backend.
#[derive(Debug)]
pub struct WeightLoader<'a, B: Backend> {
    pub file: &'a GgufFile,
    pub backend: &'a B,
}

impl<B: Backend> WeightLoader<'_, B> {
    /// Whether the checkpoint has tensor `hf_name`.
    pub fn has(&self, hf_name: &str) -> bool {
        tensor_names::hf_to_gguf(hf_name).is_some_and(|g| self.file.tensor(&g).is_some())
    }

    /// The weight `hf_name` as a [rows, cols] matrix (a vector is one row).
    pub fn load(&self, hf_name: &str) -> Result<B::Weight, ModelError> {
        let gguf = tensor_names::hf_to_gguf(hf_name).ok_or_else(|| ModelError::MissingTensor(hf_name.into()))?;
        let info =
            self.file.tensor(&gguf).ok_or_else(|| ModelError::MissingTensor(format!("{hf_name} (GGUF `{gguf}`)")))?;
        let cols = info.dims[0] as usize;
        let rows = (info.num_elems() / info.dims[0].max(1)) as usize;
        let src =
            WeightSource { name: hf_name.into(), ty: info.ty, rows, cols, bytes: self.file.tensor_host_bytes(info) };
        Ok(self.backend.load_weight(src)?)
    }

    /// Loads `hf_name` and checks its shape.
    pub fn load_shaped(&self, hf_name: &str, rows: usize, cols: usize) -> Result<B::Weight, ModelError> {
        use plumb_core::Shape;
        let w = self.load(hf_name)?;
        if (w.rows(), w.cols()) != (rows, cols) {
            return Err(ModelError::WrongShape {
                name: hf_name.into(),
                expected: (rows, cols),
                actual: (w.rows(), w.cols()),
            });
        }
        Ok(w)
    }
}
