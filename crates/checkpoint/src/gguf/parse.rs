//! Header parsing with a bounds-checked cursor. Nothing here trusts a count or offset read from
//! the file until it has been checked against the file's length.

use super::value::{MetaValue, type_id};
use super::{DEFAULT_ALIGNMENT, TensorInfo};
use crate::error::CheckpointError;
use plumb_core::GgmlType;
use std::collections::HashSet;
use std::path::Path;

/// Deepest array nesting accepted; real files use one level, the format allows any.
const MAX_ARRAY_DEPTH: usize = 8;
/// GGML's maximum tensor rank.
const MAX_DIMS: u32 = 4;

pub(super) struct Header {
    pub version: u32,
    pub metadata: Vec<(String, MetaValue)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    pub data_offset: u64,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], CheckpointError> {
        let remaining = (self.bytes.len() - self.pos) as u64;
        if n > remaining {
            return Err(CheckpointError::Truncated {
                what: what(),
                offset: self.pos as u64,
                need: n,
                file_len: self.bytes.len() as u64,
            });
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], CheckpointError> {
        let s = self.take(N as u64, what)?;
        Ok(s.try_into().expect("take returned N bytes"))
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, CheckpointError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, CheckpointError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, CheckpointError> {
        let len = self.u64(what)?;
        let offset = self.pos as u64;
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| CheckpointError::InvalidUtf8 { what: what(), offset })
    }

    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    /// Rejects a count that could not fit in the rest of the file at `min_size` bytes each.
    fn check_count(&self, count: u64, min_size: u64, what: &str) -> Result<(), CheckpointError> {
        if count.saturating_mul(min_size) > self.remaining() {
            return Err(CheckpointError::ImpossibleCount {
                what: what.to_string(),
                count,
                file_len: self.bytes.len() as u64,
            });
        }
        Ok(())
    }
}

/// Smallest encoded size of a value of type `t` (for count checks before allocating).
fn min_value_size(t: u32) -> u64 {
    match t {
        type_id::U8 | type_id::I8 | type_id::BOOL => 1,
        type_id::U16 | type_id::I16 => 2,
        type_id::U32 | type_id::I32 | type_id::F32 => 4,
        type_id::ARRAY => 12,
        _ => 8,
    }
}

fn read_value(c: &mut Cursor<'_>, key: &str, t: u32, depth: usize) -> Result<MetaValue, CheckpointError> {
    let what = || format!("value of metadata key `{key}`");
    Ok(match t {
        type_id::U8 => MetaValue::U8(c.array::<1>(&what)?[0]),
        type_id::I8 => MetaValue::I8(c.array::<1>(&what)?[0] as i8),
        type_id::U16 => MetaValue::U16(u16::from_le_bytes(c.array(&what)?)),
        type_id::I16 => MetaValue::I16(i16::from_le_bytes(c.array(&what)?)),
        type_id::U32 => MetaValue::U32(c.u32(&what)?),
        type_id::I32 => MetaValue::I32(i32::from_le_bytes(c.array(&what)?)),
        type_id::F32 => MetaValue::F32(f32::from_le_bytes(c.array(&what)?)),
        type_id::U64 => MetaValue::U64(c.u64(&what)?),
        type_id::I64 => MetaValue::I64(i64::from_le_bytes(c.array(&what)?)),
        type_id::F64 => MetaValue::F64(f64::from_le_bytes(c.array(&what)?)),
        type_id::BOOL => match c.array::<1>(&what)?[0] {
            0 => MetaValue::Bool(false),
            1 => MetaValue::Bool(true),
            b => {
                return Err(CheckpointError::BadMetadataValue {
                    key: key.to_string(),
                    why: format!("boolean byte is {b}, not 0 or 1"),
                });
            }
        },
        type_id::STRING => MetaValue::String(c.string(&what)?),
        type_id::ARRAY => {
            if depth >= MAX_ARRAY_DEPTH {
                return Err(CheckpointError::TooDeep(MAX_ARRAY_DEPTH));
            }
            let elem_type = c.u32(&what)?;
            if elem_type > type_id::F64 {
                return Err(CheckpointError::BadValueType { key: key.to_string(), type_id: elem_type });
            }
            let len = c.u64(&what)?;
            c.check_count(len, min_value_size(elem_type), &format!("array length of `{key}`"))?;
            let mut items = Vec::with_capacity(len as usize);
            for _ in 0..len {
                items.push(read_value(c, key, elem_type, depth + 1)?);
            }
            MetaValue::Array { elem_type, items }
        }
        _ => {
            return Err(CheckpointError::BadValueType { key: key.to_string(), type_id: t });
        }
    })
}

pub(super) fn parse(bytes: &[u8], path: &Path) -> Result<Header, CheckpointError> {
    let mut c = Cursor { bytes, pos: 0 };
    if bytes.len() < 4 || &bytes[..4] != b"GGUF" {
        return Err(CheckpointError::NotGguf { path: path.to_path_buf(), magic: bytes[..bytes.len().min(4)].to_vec() });
    }
    c.pos = 4;
    let version = c.u32(&|| "version".into())?;
    if !(2..=3).contains(&version) {
        return Err(CheckpointError::UnsupportedVersion(version));
    }
    let num_tensors = c.u64(&|| "tensor count".into())?;
    let num_kv = c.u64(&|| "metadata count".into())?;
    // Each key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes.
    c.check_count(num_kv, 13, "metadata")?;

    let mut metadata = Vec::with_capacity(num_kv as usize);
    let mut seen = HashSet::new();
    for i in 0..num_kv {
        let key = c.string(&|| format!("key of metadata entry {i}"))?;
        let t = c.u32(&|| format!("type of metadata key `{key}`"))?;
        let value = read_value(&mut c, &key, t, 0)?;
        if !seen.insert(key.clone()) {
            return Err(CheckpointError::DuplicateKey(key));
        }
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => match v.as_u64() {
            Some(a) if a > 0 && a.is_power_of_two() => a,
            Some(a) => return Err(CheckpointError::BadAlignment(a)),
            None => {
                return Err(CheckpointError::WrongMetadataType {
                    key: "general.alignment".into(),
                    expected: "an unsigned integer",
                    found: v.type_name().into(),
                });
            }
        },
    };

    // Each tensor info takes at least 8 (name length) + 4 (rank) + 4 (type) + 8 (offset) bytes.
    c.check_count(num_tensors, 24, "tensor")?;
    let mut tensors = Vec::with_capacity(num_tensors as usize);
    let mut names = HashSet::new();
    for i in 0..num_tensors {
        let name = c.string(&|| format!("name of tensor {i}"))?;
        let what = || format!("header of tensor `{name}`");
        let num_dims = c.u32(&what)?;
        if num_dims == 0 || num_dims > MAX_DIMS {
            return Err(CheckpointError::BadShape { name, dims: vec![], why: "rank must be 1 to 4" });
        }
        let mut dims = Vec::with_capacity(num_dims as usize);
        for _ in 0..num_dims {
            dims.push(c.u64(&what)?);
        }
        let type_id = c.u32(&what)?;
        let offset = c.u64(&what)?;
        let ty = GgmlType::from_id(type_id)
            .ok_or_else(|| CheckpointError::UnknownTensorType { name: name.clone(), type_id })?;
        let info = ty.info().ok_or_else(|| CheckpointError::UnsupportedTensorType { name: name.clone(), ty })?;
        let num_elems =
            dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).filter(|&n| n <= i64::MAX as u64).ok_or_else(
                || CheckpointError::BadShape { name: name.clone(), dims: dims.clone(), why: "element count overflows" },
            )?;
        if dims[0] % info.block_elems as u64 != 0 {
            return Err(CheckpointError::BadShape {
                name,
                dims,
                why: "row length is not a whole number of quantization blocks",
            });
        }
        let size = ty.bytes_for(num_elems).ok_or_else(|| CheckpointError::BadShape {
            name: name.clone(),
            dims: dims.clone(),
            why: "byte size overflows",
        })?;
        if offset % alignment != 0 {
            return Err(CheckpointError::MisalignedTensor { name, offset, alignment });
        }
        if !names.insert(name.clone()) {
            return Err(CheckpointError::DuplicateTensor(name));
        }
        tensors.push(TensorInfo { name, dims, ty, offset, size });
    }

    let data_offset = (c.pos as u64).div_ceil(alignment) * alignment;
    if data_offset > bytes.len() as u64 && !tensors.is_empty() {
        // Even zero-byte tensors need their (empty) slice to start inside the file.
        return Err(CheckpointError::DataPastEnd {
            data_offset,
            file_len: bytes.len() as u64,
            num_tensors: tensors.len(),
        });
    }
    let data_len = (bytes.len() as u64).saturating_sub(data_offset);
    for t in &tensors {
        if t.offset.checked_add(t.size).is_none_or(|end| end > data_len) {
            return Err(CheckpointError::TensorOutOfRange {
                name: t.name.clone(),
                offset: t.offset,
                size: t.size,
                data_len,
            });
        }
    }
    let mut by_offset: Vec<&TensorInfo> = tensors.iter().collect();
    by_offset.sort_by_key(|t| t.offset);
    for pair in by_offset.windows(2) {
        if pair[0].offset + pair[0].size > pair[1].offset {
            return Err(CheckpointError::OverlappingTensors {
                first: pair[0].name.clone(),
                second: pair[1].name.clone(),
            });
        }
    }
    Ok(Header { version, metadata, tensors, alignment, data_offset })
}
