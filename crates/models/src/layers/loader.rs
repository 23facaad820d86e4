//! Loading weights by Hugging Face name from a GGUF file onto a backend.
//! GGUF names are looked up through `plumb_checkpoint::tensor_names` — the only translation.
//! The loader records every tensor it hands out, so that after a family has loaded, any tensor
//! of the checkpoint it did not consume is a load error (`finish`) — never silently dropped.

use crate::registry::ModelError;
use plumb_checkpoint::{GgufFile, tensor_names};
use plumb_core::{Backend, Shape, WeightSource};
use std::cell::RefCell;
use std::collections::BTreeSet;

/// Loads named weights of one checkpoint onto one backend.
#[derive(Debug)]
pub struct WeightLoader<'a, B: Backend> {
    pub file: &'a GgufFile,
    pub backend: &'a B,
    /// GGUF names consumed so far.
    used: RefCell<BTreeSet<String>>,
}

impl<'a, B: Backend> WeightLoader<'a, B> {
    pub fn new(file: &'a GgufFile, backend: &'a B) -> Self {
        WeightLoader { file, backend, used: RefCell::new(BTreeSet::new()) }
    }

    fn info(&self, hf_name: &str) -> Result<&'a plumb_checkpoint::TensorInfo, ModelError> {
        let gguf = tensor_names::hf_to_gguf(hf_name).ok_or_else(|| ModelError::MissingTensor(hf_name.into()))?;
        let info =
            self.file.tensor(&gguf).ok_or_else(|| ModelError::MissingTensor(format!("{hf_name} (GGUF `{gguf}`)")))?;
        self.used.borrow_mut().insert(gguf);
        Ok(info)
    }

    /// Whether the checkpoint has tensor `hf_name`.
    pub fn has(&self, hf_name: &str) -> bool {
        tensor_names::hf_to_gguf(hf_name).is_some_and(|g| self.file.tensor(&g).is_some())
    }

    /// The weight `hf_name` as a [rows, cols] matrix (a vector is one row).
    pub fn load(&self, hf_name: &str) -> Result<B::Weight, ModelError> {
        let info = self.info(hf_name)?;
        let cols = info.dims[0] as usize;
        let rows = (info.num_elems() / info.dims[0].max(1)) as usize;
        let src =
            WeightSource { name: hf_name.into(), ty: info.ty, rows, cols, bytes: self.file.tensor_host_bytes(info) };
        Ok(self.backend.load_weight(src)?)
    }

    /// Loads `hf_name` and checks its shape.
    pub fn load_shaped(&self, hf_name: &str, rows: usize, cols: usize) -> Result<B::Weight, ModelError> {
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

    /// A vector of `len` elements (a bias) if the checkpoint has it.
    pub fn load_optional_vector(&self, hf_name: &str, len: usize) -> Result<Option<B::Weight>, ModelError> {
        if !self.has(hf_name) {
            return Ok(None);
        }
        self.load_shaped(hf_name, 1, len).map(Some)
    }

    /// A small tensor's values on the host, dequantized exactly (e.g. RoPE frequency factors).
    pub fn load_host(&self, hf_name: &str) -> Result<Vec<f32>, ModelError> {
        let info = self.info(hf_name)?;
        let mut out = vec![0f32; info.num_elems() as usize];
        plumb_core::dequantize(info.ty, self.file.tensor_data(info), &mut out).map_err(|e| {
            ModelError::Backend(plumb_core::BackendError::BadWeight { name: hf_name.into(), why: e.to_string() })
        })?;
        Ok(out)
    }

    /// Ends loading: every tensor of the checkpoint must have been consumed or be named in
    /// `ignored` (GGUF names, `blk.*.` standing for every layer; each with a reason where the
    /// family lists it).
    pub fn finish(&self, ignored: &[&str]) -> Result<(), ModelError> {
        let used = self.used.borrow();
        let unused: Vec<String> = self
            .file
            .tensors
            .iter()
            .map(|t| t.name.clone())
            .filter(|n| !used.contains(n) && !ignored.iter().any(|p| name_matches(p, n)))
            .collect();
        if unused.is_empty() { Ok(()) } else { Err(ModelError::UnusedTensors(unused)) }
    }
}

/// `pattern` equals `name`, or is `blk.*.SUFFIX` and `name` is `blk.N.SUFFIX`.
fn name_matches(pattern: &str, name: &str) -> bool {
    match (pattern.strip_prefix("blk.*."), name.strip_prefix("blk.").and_then(|r| r.split_once('.'))) {
        (Some(suffix), Some((layer, rest))) => layer.parse::<usize>().is_ok() && rest == suffix,
        _ => pattern == name,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ignore_patterns_cover_every_layer_and_nothing_else() {
        use super::name_matches;
        assert!(name_matches("blk.*.attn_rot_embd", "blk.0.attn_rot_embd"));
        assert!(name_matches("blk.*.attn_rot_embd", "blk.31.attn_rot_embd"));
        assert!(!name_matches("blk.*.attn_rot_embd", "blk.x.attn_rot_embd"));
        assert!(!name_matches("blk.*.attn_rot_embd", "blk.0.attn_q.bias"));
        assert!(name_matches("rope_freqs.weight", "rope_freqs.weight"));
    }
}
