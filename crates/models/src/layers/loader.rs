//! Loading weights by Hugging Face name from any checkpoint (GGUF or a Hugging Face folder) onto
//! a backend. GGUF names are translated inside `plumb_checkpoint` — the only translation.
//! The loader records every tensor it hands out, so that after a family has loaded, any tensor
//! of the checkpoint it did not consume is a load error (`finish`) — never silently dropped.

use crate::registry::ModelError;
use plumb_checkpoint::{CheckpointRef, WeightView};
use plumb_core::{Backend, Shape, WeightSource};
use std::cell::RefCell;
use std::collections::BTreeSet;

/// Loads named weights of one checkpoint onto one backend.
#[derive(Debug)]
pub struct WeightLoader<'a, B: Backend> {
    pub checkpoint: CheckpointRef<'a>,
    pub backend: &'a B,
    /// Hugging Face names consumed so far.
    used: RefCell<BTreeSet<String>>,
}

impl<'a, B: Backend> WeightLoader<'a, B> {
    pub fn new(checkpoint: impl Into<CheckpointRef<'a>>, backend: &'a B) -> Self {
        WeightLoader { checkpoint: checkpoint.into(), backend, used: RefCell::new(BTreeSet::new()) }
    }

    fn view(&self, hf_name: &str) -> Result<WeightView<'a>, ModelError> {
        let view = self.checkpoint.weight(hf_name)?.ok_or_else(|| ModelError::MissingTensor(hf_name.into()))?;
        self.used.borrow_mut().insert(hf_name.into());
        Ok(view)
    }

    /// Whether the checkpoint has tensor `hf_name`.
    pub fn has(&self, hf_name: &str) -> bool {
        self.checkpoint.weight(hf_name).is_ok_and(|w| w.is_some())
    }

    /// The weight `hf_name` as a [rows, cols] matrix (a vector is one row).
    pub fn load(&self, hf_name: &str) -> Result<B::Weight, ModelError> {
        let v = self.view(hf_name)?;
        let src = WeightSource { name: hf_name.into(), ty: v.ty, rows: v.rows, cols: v.cols, bytes: v.bytes };
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

    /// The whole tensor `hf_name` (of any rank) as one [1, len] row: small per-channel tensors
    /// such as depthwise-convolution taps ([C, 1, K] → C·K values, channel-major).
    pub fn load_flat(&self, hf_name: &str, len: usize) -> Result<B::Weight, ModelError> {
        let v = self.view(hf_name)?;
        if v.rows * v.cols != len {
            return Err(ModelError::WrongShape { name: hf_name.into(), expected: (1, len), actual: (v.rows, v.cols) });
        }
        let src = WeightSource { name: hf_name.into(), ty: v.ty, rows: 1, cols: len, bytes: v.bytes };
        Ok(self.backend.load_weight(src)?)
    }

    /// Checks that `hf_name` is [rows, cols] and returns row groups of it as separate weights:
    /// `parts[i]` lists the row ranges (in order) that make weight i. Rows are copied as stored,
    /// so splitting a fused projection changes no value (and no rounding) of its product.
    pub fn load_row_parts(
        &self,
        hf_name: &str,
        rows: usize,
        cols: usize,
        parts: &[Vec<std::ops::Range<usize>>],
    ) -> Result<Vec<B::Weight>, ModelError> {
        let v = self.view(hf_name)?;
        if (v.rows, v.cols) != (rows, cols) {
            return Err(ModelError::WrongShape {
                name: hf_name.into(),
                expected: (rows, cols),
                actual: (v.rows, v.cols),
            });
        }
        let row_bytes = v.data.len() / rows.max(1);
        parts
            .iter()
            .enumerate()
            .map(|(i, ranges)| {
                let mut bytes = Vec::new();
                for r in ranges {
                    bytes.extend_from_slice(&v.data[r.start * row_bytes..r.end * row_bytes]);
                }
                let n: usize = ranges.iter().map(|r| r.len()).sum();
                let src = WeightSource {
                    name: format!("{hf_name}[part {i}]"),
                    ty: v.ty,
                    rows: n,
                    cols,
                    bytes: plumb_core::HostBytes::from_vec(bytes),
                };
                Ok(self.backend.load_weight(src)?)
            })
            .collect()
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
        let v = self.view(hf_name)?;
        let mut out = vec![0f32; v.rows * v.cols];
        plumb_core::dequantize(v.ty, v.data, &mut out).map_err(|e| {
            ModelError::Backend(plumb_core::BackendError::BadWeight { name: hf_name.into(), why: e.to_string() })
        })?;
        Ok(out)
    }

    /// An integer table (I64 in the checkpoint) on the host, as [rows, cols] values.
    pub fn load_host_i64(&self, hf_name: &str) -> Result<(Vec<i64>, usize, usize), ModelError> {
        let v = self.view(hf_name)?;
        if v.ty != plumb_core::GgmlType::I64 || v.data.len() != v.rows * v.cols * 8 {
            return Err(ModelError::BadValue {
                name: hf_name.into(),
                why: format!("is {}, expected an I64 table", v.ty),
            });
        }
        let values = v.data.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes"))).collect();
        Ok((values, v.rows, v.cols))
    }

    /// Ends loading: every tensor of the checkpoint must have been consumed or be named in
    /// `ignored` (Hugging Face names, `model.layers.*.` standing for every layer, a trailing `.*`
    /// for everything under a prefix; each with a reason where the family lists it).
    pub fn finish(&self, ignored: &[&str]) -> Result<(), ModelError> {
        let used = self.used.borrow();
        let unused: Vec<String> = self
            .checkpoint
            .weight_names()
            .into_iter()
            .filter(|n| !used.contains(n) && !ignored.iter().any(|p| name_matches(p, n)))
            .collect();
        if unused.is_empty() { Ok(()) } else { Err(ModelError::UnusedTensors(unused)) }
    }
}

/// `pattern` equals `name`, or is `model.layers.*.SUFFIX` and `name` is `model.layers.N.SUFFIX`,
/// or is `PREFIX.*` and `name` starts with `PREFIX.`.
fn name_matches(pattern: &str, name: &str) -> bool {
    if let Some(prefix) = pattern.strip_suffix(".*")
        && let Some(rest) = name.strip_prefix(prefix)
    {
        return rest.starts_with('.');
    }
    let layer_rest = name.strip_prefix("model.layers.").and_then(|r| r.split_once('.'));
    match (pattern.strip_prefix("model.layers.*."), layer_rest) {
        (Some(suffix), Some((layer, rest))) => layer.parse::<usize>().is_ok() && rest == suffix,
        _ => pattern == name,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ignore_patterns_cover_every_layer_and_nothing_else() {
        use super::name_matches;
        let inv = "model.layers.*.self_attn.rotary_emb.inv_freq";
        assert!(name_matches(inv, "model.layers.0.self_attn.rotary_emb.inv_freq"));
        assert!(name_matches(inv, "model.layers.31.self_attn.rotary_emb.inv_freq"));
        assert!(!name_matches(inv, "model.layers.x.self_attn.rotary_emb.inv_freq"));
        assert!(!name_matches(inv, "model.layers.0.self_attn.q_proj.bias"));
        assert!(name_matches("model.rope_freqs.weight", "model.rope_freqs.weight"));
        assert!(name_matches("model.visual.*", "model.visual.blocks.0.attn.qkv.weight"));
        assert!(!name_matches("model.visual.*", "model.visual_extra.weight"));
        assert!(!name_matches("model.visual.*", "model.language_model.norm.weight"));
    }
}
