//! Hugging Face model folders (`config.json` + safetensors) and the one view over any checkpoint
//! that model loading reads: weights by Hugging Face name, whatever the file format.
//! Owns: opening a folder, the dtype and shape translation of safetensors tensors. Does not own:
//! the tokenizer files (plumb-tokenizer reads them) or what a family does with the weights.
//! Invariant: a `CheckpointRef` names every tensor in Hugging Face terms; GGUF names are
//! translated through `tensor_names` and nowhere else.

use crate::error::CheckpointError;
use crate::gguf::{GgufFile, TensorInfo};
use crate::hparams::ModelConfig;
use crate::safetensors::SafetensorsModel;
use crate::tensor_names;
use plumb_core::{GgmlType, HostBytes};
use std::path::{Path, PathBuf};

/// A Hugging Face model folder: its parsed `config.json` and its safetensors weights.
#[derive(Debug)]
pub struct HfCheckpoint {
    dir: PathBuf,
    pub config: ModelConfig,
    /// `config.json` as parsed JSON, for the settings only one family reads (its experts, say):
    /// the family parses those itself; `config` holds what every family shares.
    pub config_json: serde_json::Map<String, serde_json::Value>,
    pub weights: SafetensorsModel,
}

impl HfCheckpoint {
    /// Reads and validates `dir/config.json`, then maps and validates the safetensors weights.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let dir = dir.as_ref().to_path_buf();
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path).map_err(|e| CheckpointError::io(&config_path, e))?;
        let config = ModelConfig::from_hf_json(&text).map_err(|e| match e {
            CheckpointError::BadConfig { key, why, .. } => {
                CheckpointError::BadConfig { file: config_path.display().to_string(), key, why }
            }
            other => other,
        })?;
        let config_json = match serde_json::from_str(&text) {
            Ok(serde_json::Value::Object(m)) => m,
            // `from_hf_json` has already refused anything else.
            _ => {
                return Err(CheckpointError::BadConfig {
                    file: config_path.display().to_string(),
                    key: "(file)".into(),
                    why: "is not a JSON object".into(),
                });
            }
        };
        let weights = SafetensorsModel::open(&dir)?;
        Ok(HfCheckpoint { dir, config, config_json, weights })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The text of `name` in the folder, if present (tokenizer and generation files).
    pub fn read_optional(&self, name: &str) -> Result<Option<String>, CheckpointError> {
        read_optional(&self.dir.join(name))
    }
}

/// The text of the file at `path`, or `None` when it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<String>, CheckpointError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CheckpointError::io(path, e)),
    }
}

/// Whether `path` is a Hugging Face model folder (a directory holding `config.json`).
pub fn is_hf_dir(path: &Path) -> bool {
    path.is_dir() && path.join("config.json").is_file()
}

/// An open checkpoint of either format.
#[derive(Debug)]
pub enum Checkpoint {
    Gguf(GgufFile),
    Hf(HfCheckpoint),
}

impl Checkpoint {
    /// A Hugging Face folder when `path` is one, else a GGUF file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let path = path.as_ref();
        if is_hf_dir(path) {
            HfCheckpoint::open(path).map(Checkpoint::Hf)
        } else {
            GgufFile::open(path).map(Checkpoint::Gguf)
        }
    }

    pub fn as_ref(&self) -> CheckpointRef<'_> {
        match self {
            Checkpoint::Gguf(f) => CheckpointRef::Gguf(f),
            Checkpoint::Hf(h) => CheckpointRef::Hf(h),
        }
    }
}

/// A borrowed checkpoint of either format: what model loading reads.
#[derive(Clone, Copy, Debug)]
pub enum CheckpointRef<'a> {
    Gguf(&'a GgufFile),
    Hf(&'a HfCheckpoint),
}

impl<'a> From<&'a GgufFile> for CheckpointRef<'a> {
    fn from(f: &'a GgufFile) -> Self {
        CheckpointRef::Gguf(f)
    }
}

impl<'a> From<&'a HfCheckpoint> for CheckpointRef<'a> {
    fn from(h: &'a HfCheckpoint) -> Self {
        CheckpointRef::Hf(h)
    }
}

impl<'a> From<&'a Checkpoint> for CheckpointRef<'a> {
    fn from(c: &'a Checkpoint) -> Self {
        c.as_ref()
    }
}

/// One weight as a [rows, cols] matrix (a vector is one row; outer dimensions fold into rows).
#[derive(Clone, Debug)]
pub struct WeightView<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    /// The stored bytes, shareable without a copy.
    pub bytes: HostBytes,
    pub data: &'a [u8],
}

impl<'a> CheckpointRef<'a> {
    /// The hyper-parameters: GGUF metadata or the folder's `config.json`.
    pub fn config(&self) -> Result<ModelConfig, CheckpointError> {
        match self {
            CheckpointRef::Gguf(f) => ModelConfig::from_gguf(f),
            CheckpointRef::Hf(h) => Ok(h.config.clone()),
        }
    }

    /// A Hugging Face folder's `config.json` as JSON (`None` for GGUF, whose metadata is typed).
    pub fn config_json(&self) -> Option<&'a serde_json::Map<String, serde_json::Value>> {
        match self {
            CheckpointRef::Gguf(_) => None,
            CheckpointRef::Hf(h) => Some(&h.config_json),
        }
    }

    /// The file or folder it was opened from.
    pub fn path(&self) -> &'a Path {
        match self {
            CheckpointRef::Gguf(f) => f.path(),
            CheckpointRef::Hf(h) => h.dir(),
        }
    }

    /// Every tensor's Hugging Face name (a GGUF name the table does not know stays as it is).
    pub fn weight_names(&self) -> Vec<String> {
        match self {
            CheckpointRef::Gguf(f) => f
                .tensors
                .iter()
                .flat_map(|t| match tensor_names::gguf_experts_to_hf(&t.name, expert_count(t)) {
                    Some(names) => names,
                    None => vec![tensor_names::gguf_to_hf(&t.name).unwrap_or_else(|| t.name.clone())],
                })
                .collect(),
            CheckpointRef::Hf(h) => h.weights.names().into_iter().map(String::from).collect(),
        }
    }

    /// Weight `hf_name`, `None` when absent; an error when its element type is not one plumb computes with.
    pub fn weight(&self, hf_name: &str) -> Result<Option<WeightView<'a>>, CheckpointError> {
        match *self {
            CheckpointRef::Gguf(f) => {
                if let Some((stacked, expert)) = tensor_names::hf_expert_to_gguf(hf_name) {
                    return Ok(f.tensor(&stacked).and_then(|info| gguf_expert(f, info, expert)));
                }
                let Some(info) = tensor_names::hf_to_gguf(hf_name).and_then(|g| f.tensor(&g)) else { return Ok(None) };
                let cols = info.dims[0] as usize;
                let rows = (info.num_elems() / info.dims[0].max(1)) as usize;
                let (bytes, data) = (f.tensor_host_bytes(info), f.tensor_data(info));
                Ok(Some(WeightView { ty: info.ty, rows, cols, bytes, data }))
            }
            CheckpointRef::Hf(h) => {
                let Some((file, info)) = h.weights.tensor(hf_name) else { return Ok(None) };
                let ty = info.dtype.ggml().ok_or_else(|| CheckpointError::BadSafetensors {
                    path: file.path().to_path_buf(),
                    why: format!(
                        "tensor `{hf_name}` is {:?}; plumb loads F32, F16 and BF16 weights and I64 tables",
                        info.dtype
                    ),
                })?;
                let (rows, cols) = match info.shape.as_slice() {
                    [] => (1, 1),
                    [n] => (1, *n),
                    [outer @ .., last] => (outer.iter().product(), *last),
                };
                let (bytes, data) = (file.tensor_host_bytes(info), file.tensor_data(info));
                Ok(Some(WeightView { ty, rows, cols, bytes, data }))
            }
        }
    }
}

/// Experts in a stacked GGUF expert tensor (its outermost dimension; 0 for a tensor that is not
/// 3-D, which then names no expert).
fn expert_count(info: &TensorInfo) -> usize {
    match info.dims.as_slice() {
        [_, _, n] => *n as usize,
        _ => 0,
    }
}

/// Expert `expert`'s [rows, cols] matrix inside a stacked GGUF tensor [cols, rows, num_experts]:
/// a contiguous run of whole rows, so quantized blocks are never cut.
fn gguf_expert<'a>(f: &'a GgufFile, info: &TensorInfo, expert: usize) -> Option<WeightView<'a>> {
    let (cols, rows, num) = match info.dims.as_slice() {
        [c, r, n] => (*c as usize, *r as usize, *n as usize),
        _ => return None,
    };
    if expert >= num {
        return None;
    }
    // The reader checked that `size` is the bytes of all `num` matrices.
    let each = info.size as usize / num;
    let data = &f.tensor_data(info)[expert * each..(expert + 1) * each];
    let bytes = f.tensor_host_bytes(info).slice(expert * each, each);
    Some(WeightView { ty: info.ty, rows, cols, bytes, data })
}
