//! A small GGUF writer (version 3): builds valid files for tests, fixtures and tools.
//! It writes exactly what it is given; validity of shapes and types is the reader's to check.

use super::DEFAULT_ALIGNMENT;
use super::value::{MetaValue, type_id};
use plumb_core::GgmlType;

/// Accumulates metadata and tensors, then lays them out as GGUF bytes.
#[derive(Debug, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
}

fn value_type(v: &MetaValue) -> u32 {
    match v {
        MetaValue::U8(_) => type_id::U8,
        MetaValue::I8(_) => type_id::I8,
        MetaValue::U16(_) => type_id::U16,
        MetaValue::I16(_) => type_id::I16,
        MetaValue::U32(_) => type_id::U32,
        MetaValue::I32(_) => type_id::I32,
        MetaValue::U64(_) => type_id::U64,
        MetaValue::I64(_) => type_id::I64,
        MetaValue::F32(_) => type_id::F32,
        MetaValue::F64(_) => type_id::F64,
        MetaValue::Bool(_) => type_id::BOOL,
        MetaValue::String(_) => type_id::STRING,
        MetaValue::Array { .. } => type_id::ARRAY,
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.push(*x as u8),
        MetaValue::U16(x) => out.extend(x.to_le_bytes()),
        MetaValue::I16(x) => out.extend(x.to_le_bytes()),
        MetaValue::U32(x) => out.extend(x.to_le_bytes()),
        MetaValue::I32(x) => out.extend(x.to_le_bytes()),
        MetaValue::U64(x) => out.extend(x.to_le_bytes()),
        MetaValue::I64(x) => out.extend(x.to_le_bytes()),
        MetaValue::F32(x) => out.extend(x.to_le_bytes()),
        MetaValue::F64(x) => out.extend(x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(*x as u8),
        MetaValue::String(s) => put_str(out, s),
        MetaValue::Array { elem_type, items } => {
            out.extend(elem_type.to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a metadata entry (kept in insertion order).
    pub fn meta(&mut self, key: &str, value: MetaValue) -> &mut Self {
        self.metadata.push((key.to_string(), value));
        self
    }

    /// Adds a string-array metadata entry.
    pub fn meta_strs(&mut self, key: &str, items: &[&str]) -> &mut Self {
        let items = items.iter().map(|s| MetaValue::String(s.to_string())).collect();
        self.meta(key, MetaValue::Array { elem_type: type_id::STRING, items })
    }

    /// Adds a tensor; `dims` in GGML order (innermost first).
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: GgmlType, data: Vec<u8>) -> &mut Self {
        self.tensor_raw(name, dims, ty.id(), data)
    }

    /// Adds a tensor with a raw type id (to build files with unknown types).
    pub fn tensor_raw(&mut self, name: &str, dims: &[u64], type_id: u32, data: Vec<u8>) -> &mut Self {
        self.tensors.push((name.to_string(), dims.to_vec(), type_id, data));
        self
    }

    /// Lays the file out: header, metadata, tensor infos, padding, aligned tensor data.
    pub fn to_bytes(&self) -> Vec<u8> {
        let alignment = self
            .metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_u64())
            .filter(|a| a.is_power_of_two())
            .unwrap_or(DEFAULT_ALIGNMENT) as usize;
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut out, k);
            out.extend(value_type(v).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offset = 0usize;
        for (name, dims, ty, data) in &self.tensors {
            put_str(&mut out, name);
            out.extend((dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(ty.to_le_bytes());
            out.extend((offset as u64).to_le_bytes());
            offset = (offset + data.len()).div_ceil(alignment) * alignment;
        }
        out.resize(out.len().div_ceil(alignment) * alignment, 0);
        for (_, _, _, data) in &self.tensors {
            out.extend(data);
            out.resize(out.len().div_ceil(alignment) * alignment, 0);
        }
        out
    }
}
