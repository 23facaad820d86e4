//! The GGUF reader (format versions 2 and 3) over a read-only memory map.
//! Invariant: after `open` succeeds, every tensor's bytes lie inside the file, aligned, without
//! overlap, and their length equals what the type and shape require — so `tensor_data` cannot fail.
//! Only the header is touched while opening; tensor pages are read when a backend first uses them.

mod parse;
mod value;
pub mod writer;

use crate::error::CheckpointError;
use memmap2::Mmap;
use plumb_core::{GgmlType, HostBytes};
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use value::MetaValue;

/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// One tensor's header entry. `dims` are GGML order: `dims[0]` is the innermost (row) length.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Offset from the start of the data section.
    pub offset: u64,
    /// Bytes taken, from `ty` and `dims`.
    pub size: u64,
}

impl TensorInfo {
    /// Number of elements.
    pub fn num_elems(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Shape in row-major (PyTorch / Hugging Face) order: outermost first.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

/// An opened GGUF file: parsed header plus the mapped bytes.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    mmap: Arc<Mmap>,
    pub version: u32,
    /// Metadata in file order.
    pub metadata: Vec<(String, MetaValue)>,
    key_idx: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    tensor_idx: HashMap<String, usize>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
}

impl GgufFile {
    /// Maps and validates the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| CheckpointError::io(&path, e))?;
        // SAFETY: the map is read-only and private to this process. plumb never writes model files;
        // a file truncated by another process while mapped is outside what any mmap reader can guard.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| CheckpointError::io(&path, e))?;
        let header = parse::parse(&mmap, &path)?;
        let mmap = Arc::new(mmap);
        let key_idx = header.metadata.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect();
        let tensor_idx = header.tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(GgufFile {
            path,
            mmap,
            version: header.version,
            metadata: header.metadata,
            key_idx,
            tensors: header.tensors,
            tensor_idx,
            alignment: header.alignment,
            data_offset: header.data_offset,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the whole file in bytes.
    pub fn file_len(&self) -> u64 {
        self.mmap.len() as u64
    }

    /// The metadata value under `key`, if present.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.key_idx.get(key).map(|&i| &self.metadata[i].1)
    }

    fn require(&self, key: &str) -> Result<&MetaValue, CheckpointError> {
        self.get(key).ok_or_else(|| CheckpointError::MissingMetadata(key.to_string()))
    }

    fn wrong(key: &str, expected: &'static str, found: &MetaValue) -> CheckpointError {
        CheckpointError::WrongMetadataType { key: key.to_string(), expected, found: found.type_name().to_string() }
    }

    /// A required string value.
    pub fn get_str(&self, key: &str) -> Result<&str, CheckpointError> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| Self::wrong(key, "a string", v))
    }

    /// A required non-negative integer of any width.
    pub fn get_u64(&self, key: &str) -> Result<u64, CheckpointError> {
        let v = self.require(key)?;
        v.as_u64().ok_or_else(|| Self::wrong(key, "a non-negative integer", v))
    }

    /// A required float of either width.
    pub fn get_f64(&self, key: &str) -> Result<f64, CheckpointError> {
        let v = self.require(key)?;
        v.as_f64().ok_or_else(|| Self::wrong(key, "a float", v))
    }

    /// A required array.
    pub fn get_array(&self, key: &str) -> Result<&[MetaValue], CheckpointError> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| Self::wrong(key, "an array", v))
    }

    /// An optional value, type-checked when present.
    pub fn opt<T>(
        &self,
        key: &str,
        expected: &'static str,
        conv: impl Fn(&MetaValue) -> Option<T>,
    ) -> Result<Option<T>, CheckpointError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => conv(v).map(Some).ok_or_else(|| Self::wrong(key, expected, v)),
        }
    }

    /// A required array of strings.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>, CheckpointError> {
        let items = self.get_array(key)?;
        items.iter().map(|v| v.as_str().ok_or_else(|| Self::wrong(key, "an array of strings", v))).collect()
    }

    /// The header entry of tensor `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_idx.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of tensor `name`.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8], CheckpointError> {
        let info = self.tensor(name).ok_or_else(|| CheckpointError::MissingTensor(name.to_string()))?;
        Ok(self.tensor_data(info))
    }

    /// The bytes of a tensor of this file (validated at open).
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        let start = (self.data_offset + info.offset) as usize;
        &self.mmap[start..start + info.size as usize]
    }

    /// A shareable view of a tensor's bytes that keeps the mapping alive (for backends that
    /// compute straight from the page cache).
    pub fn tensor_host_bytes(&self, info: &TensorInfo) -> HostBytes {
        HostBytes::new(self.mmap.clone(), (self.data_offset + info.offset) as usize, info.size as usize)
    }

    /// Bytes of all tensor data.
    pub fn tensor_data_len(&self) -> u64 {
        self.tensors.iter().map(|t| t.size).sum()
    }
}
