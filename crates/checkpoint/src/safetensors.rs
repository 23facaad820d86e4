//! Hugging Face safetensors over a memory map: one file (`SafetensorsFile`), or a model folder's
//! `model.safetensors` / sharded `model-0000N-of-0000M.safetensors` with its index
//! (`SafetensorsModel`). Every header length, name, dtype, shape and offset is validated before
//! any tensor is read: each tensor's bytes lie inside the data section, match its shape and dtype,
//! and no two tensors overlap; the data section has no holes (as the format requires).
//! Invariant: after `open`, tensor access cannot fail or read out of bounds.

use crate::CheckpointError;
use memmap2::Mmap;
use plumb_core::{GgmlType, HostBytes};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest header plumb reads (the reference implementation's limit).
const MAX_HEADER_BYTES: u64 = 100 << 20;

/// The element types of the format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StDtype {
    F64,
    F32,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
    F8E4M3,
    F8E5M2,
}

impl StDtype {
    fn parse(s: &str) -> Option<Self> {
        use StDtype::*;
        Some(match s {
            "F64" => F64,
            "F32" => F32,
            "F16" => F16,
            "BF16" => BF16,
            "I64" => I64,
            "I32" => I32,
            "I16" => I16,
            "I8" => I8,
            "U8" => U8,
            "BOOL" => Bool,
            "F8_E4M3" => F8E4M3,
            "F8_E5M2" => F8E5M2,
            _ => return None,
        })
    }

    pub fn size(self) -> u64 {
        use StDtype::*;
        match self {
            F64 | I64 => 8,
            F32 | I32 => 4,
            F16 | BF16 | I16 => 2,
            I8 | U8 | Bool | F8E4M3 | F8E5M2 => 1,
        }
    }

    /// The weight type a backend loads, for the types plumb computes with (and integer tables).
    pub fn ggml(self) -> Option<GgmlType> {
        match self {
            StDtype::F32 => Some(GgmlType::F32),
            StDtype::F16 => Some(GgmlType::F16),
            StDtype::BF16 => Some(GgmlType::BF16),
            // Integer tables (DeepSeek V4's token → experts map), read on the host, never a weight.
            StDtype::I64 => Some(GgmlType::I64),
            _ => None,
        }
    }
}

/// One tensor of a safetensors file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StTensorInfo {
    pub name: String,
    pub dtype: StDtype,
    /// Outermost first, as PyTorch stores it.
    pub shape: Vec<usize>,
    /// Byte range in the data section.
    pub begin: u64,
    pub end: u64,
}

/// A validated, memory-mapped safetensors file.
#[derive(Debug)]
pub struct SafetensorsFile {
    path: PathBuf,
    mmap: Arc<Mmap>,
    data_offset: u64,
    tensors: Vec<StTensorInfo>,
    index: HashMap<String, usize>,
    metadata: Vec<(String, String)>,
}

fn bad(path: &Path, why: impl Into<String>) -> CheckpointError {
    CheckpointError::BadSafetensors { path: path.to_path_buf(), why: why.into() }
}

/// A JSON object's entries in order, refusing a key that appears twice (serde_json would keep
/// only the last, silently).
struct Entries(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut out: Vec<(String, Value)> = Vec::new();
                let mut seen = std::collections::HashSet::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    if !seen.insert(k.clone()) {
                        return Err(serde::de::Error::custom(format!("key `{k}` appears twice")));
                    }
                    out.push((k, v));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// (data section offset, tensors, `__metadata__` entries) of a validated header.
type Header = (u64, Vec<StTensorInfo>, Vec<(String, String)>);

/// Parses and validates the header of `bytes` (a whole file).
fn parse(bytes: &[u8], path: &Path) -> Result<Header, CheckpointError> {
    let file_len = bytes.len() as u64;
    if file_len < 8 {
        return Err(bad(
            path,
            format!("the file has {file_len} bytes; a safetensors file starts with an 8-byte header length"),
        ));
    }
    let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    if header_len > MAX_HEADER_BYTES || header_len > file_len - 8 {
        return Err(bad(path, format!("the header length {header_len} is impossible for a file of {file_len} bytes")));
    }
    let data_offset = 8 + header_len;
    let text =
        std::str::from_utf8(&bytes[8..data_offset as usize]).map_err(|_| bad(path, "the header is not UTF-8"))?;
    let Entries(entries) = serde_json::from_str(text.trim_end_matches(' '))
        .map_err(|e| bad(path, format!("the header is not a JSON object: {e}")))?;
    let data_len = file_len - data_offset;
    let (mut tensors, mut metadata) = (Vec::new(), Vec::new());
    for (name, v) in entries {
        if name == "__metadata__" {
            let Value::Object(m) = v else { return Err(bad(path, "__metadata__ is not an object")) };
            for (k, v) in m {
                let Value::String(s) = v else {
                    return Err(bad(path, format!("__metadata__ value `{k}` is not a string")));
                };
                metadata.push((k, s));
            }
            continue;
        }
        let field = |f: &str| v.get(f).ok_or_else(|| bad(path, format!("tensor `{name}` has no `{f}`")));
        let dtype_s =
            field("dtype")?.as_str().ok_or_else(|| bad(path, format!("tensor `{name}`: dtype is not a string")))?;
        let dtype = StDtype::parse(dtype_s)
            .ok_or_else(|| bad(path, format!("tensor `{name}` has unknown dtype `{dtype_s}`")))?;
        let shape: Vec<usize> = field("shape")?
            .as_array()
            .and_then(|a| a.iter().map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok())).collect())
            .ok_or_else(|| bad(path, format!("tensor `{name}`: shape is not a list of sizes")))?;
        let offsets: Vec<u64> = field("data_offsets")?
            .as_array()
            .and_then(|a| a.iter().map(Value::as_u64).collect())
            .filter(|o: &Vec<u64>| o.len() == 2)
            .ok_or_else(|| bad(path, format!("tensor `{name}`: data_offsets is not [begin, end]")))?;
        let (begin, end) = (offsets[0], offsets[1]);
        let size = shape
            .iter()
            .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d as u64))
            .ok_or_else(|| bad(path, format!("tensor `{name}`: shape {shape:?} overflows")))?;
        if begin > end || end > data_len {
            return Err(bad(
                path,
                format!("tensor `{name}` bytes {begin}..{end} lie outside the {data_len}-byte data section"),
            ));
        }
        if end - begin != size {
            let why = format!("tensor `{name}` holds {} bytes, but {dtype_s} {shape:?} needs {size}", end - begin);
            return Err(bad(path, why));
        }
        tensors.push(StTensorInfo { name, dtype, shape, begin, end });
    }
    let mut order: Vec<&StTensorInfo> = tensors.iter().filter(|t| t.end > t.begin).collect();
    order.sort_by_key(|t| (t.begin, t.end));
    let mut covered = 0;
    for t in order {
        if t.begin < covered {
            return Err(bad(path, format!("tensor `{}` overlaps another tensor", t.name)));
        }
        if t.begin > covered {
            return Err(bad(path, format!("bytes {covered}..{} of the data section belong to no tensor", t.begin)));
        }
        covered = t.end;
    }
    if covered != data_len {
        return Err(bad(path, format!("bytes {covered}..{data_len} of the data section belong to no tensor")));
    }
    Ok((data_offset, tensors, metadata))
}

impl SafetensorsFile {
    /// Maps and validates the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| CheckpointError::io(&path, e))?;
        // SAFETY: the map is read-only and private to this process. plumb never writes model files;
        // a file truncated by another process while mapped is outside what any mmap reader can guard.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| CheckpointError::io(&path, e))?;
        let (data_offset, tensors, metadata) = parse(&mmap, &path)?;
        let index = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(SafetensorsFile { path, mmap: Arc::new(mmap), data_offset, tensors, index, metadata })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn tensors(&self) -> &[StTensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&StTensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// `__metadata__`, in file order.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// The tensor's bytes, little-endian, as stored.
    pub fn tensor_data(&self, t: &StTensorInfo) -> &[u8] {
        &self.mmap[(self.data_offset + t.begin) as usize..(self.data_offset + t.end) as usize]
    }

    /// A shareable view of the tensor's bytes (no copy).
    pub fn tensor_host_bytes(&self, t: &StTensorInfo) -> HostBytes {
        HostBytes::new(self.mmap.clone(), (self.data_offset + t.begin) as usize, (t.end - t.begin) as usize)
    }
}

/// A model folder's weights: one safetensors file or the shards its index names.
#[derive(Debug)]
pub struct SafetensorsModel {
    shards: Vec<SafetensorsFile>,
    /// tensor name → shard index
    index: HashMap<String, usize>,
}

impl SafetensorsModel {
    /// Opens `dir/model.safetensors.index.json` and its shards, else `dir/model.safetensors`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let dir = dir.as_ref();
        let index_path = dir.join("model.safetensors.index.json");
        if !index_path.exists() {
            let single = dir.join("model.safetensors");
            if !single.exists() {
                return Err(bad(dir, "the folder has neither model.safetensors nor model.safetensors.index.json"));
            }
            let file = SafetensorsFile::open(single)?;
            let index = file.tensors().iter().map(|t| (t.name.clone(), 0)).collect();
            return Ok(SafetensorsModel { shards: vec![file], index });
        }
        let text = std::fs::read_to_string(&index_path).map_err(|e| CheckpointError::io(&index_path, e))?;
        let json: Value = serde_json::from_str(&text).map_err(|e| bad(&index_path, format!("not JSON: {e}")))?;
        let map = json
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| bad(&index_path, "no `weight_map` object"))?;
        let (mut shards, mut shard_of_file, mut index) = (Vec::new(), HashMap::new(), HashMap::new());
        for (name, file) in map {
            let file =
                file.as_str().ok_or_else(|| bad(&index_path, format!("weight_map[`{name}`] is not a file name")))?;
            if file.contains('/') || file.contains('\\') || file == ".." {
                return Err(bad(&index_path, format!("weight_map[`{name}`] names `{file}`, outside the folder")));
            }
            let shard = match shard_of_file.get(file) {
                Some(&i) => i,
                None => {
                    let path = dir.join(file);
                    if !path.exists() {
                        return Err(bad(&index_path, format!("shard `{file}` (for `{name}`) is missing")));
                    }
                    shards.push(SafetensorsFile::open(path)?);
                    shard_of_file.insert(file.to_string(), shards.len() - 1);
                    shards.len() - 1
                }
            };
            if shards[shard].tensor(name).is_none() {
                return Err(bad(&index_path, format!("`{name}` is listed in shard `{file}`, which does not hold it")));
            }
            index.insert(name.clone(), shard);
        }
        for s in &shards {
            if let Some(t) = s.tensors().iter().find(|t| !index.contains_key(&t.name)) {
                return Err(bad(s.path(), format!("tensor `{}` is not in the index's weight_map", t.name)));
            }
        }
        Ok(SafetensorsModel { shards, index })
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.index.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    /// The tensor and the file holding it.
    pub fn tensor(&self, name: &str) -> Option<(&SafetensorsFile, &StTensorInfo)> {
        let shard = &self.shards[*self.index.get(name)?];
        Some((shard, shard.tensor(name)?))
    }
}
