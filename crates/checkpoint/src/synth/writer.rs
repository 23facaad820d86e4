//! Writing safetensors files as Hugging Face does, streamed: the shard plan (tensors in order,
//! a new shard when the next tensor would pass the size limit), each file's header (8-byte
//! little-endian length, JSON padded with spaces to a multiple of 8, tensors packed back to back
//! from offset 0) and the `model.safetensors.index.json` of a sharded model.
//! Invariants: what is written passes `SafetensorsModel::open` (no holes, no overlaps, sizes match
//! shapes); at most one batch of chunks is in memory, whatever the model's size.

use super::arch::{Init, Stored, TensorSpec};
use super::rng::{Bell, CHUNK_ELEMS, Stream, name_hash};
use crate::error::CheckpointError;
use crate::source::Progress;
use serde_json::{Map, Value, json};
use std::io::Write;
use std::path::Path;

/// The element type of the written weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynthDtype {
    BF16,
    F16,
    F32,
}

impl SynthDtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            SynthDtype::BF16 | SynthDtype::F16 => 2,
            SynthDtype::F32 => 4,
        }
    }

    /// The safetensors dtype name.
    pub fn safetensors_name(self) -> &'static str {
        match self {
            SynthDtype::BF16 => "BF16",
            SynthDtype::F16 => "F16",
            SynthDtype::F32 => "F32",
        }
    }

    /// The `torch_dtype` of `config.json`.
    pub fn torch_name(self) -> &'static str {
        match self {
            SynthDtype::BF16 => "bfloat16",
            SynthDtype::F16 => "float16",
            SynthDtype::F32 => "float32",
        }
    }

    fn encode(self, x: f32, out: &mut [u8]) {
        match self {
            SynthDtype::BF16 => out.copy_from_slice(&half::bf16::from_f32(x).to_bits().to_le_bytes()),
            SynthDtype::F16 => out.copy_from_slice(&half::f16::from_f32(x).to_bits().to_le_bytes()),
            SynthDtype::F32 => out.copy_from_slice(&x.to_le_bytes()),
        }
    }
}

impl std::str::FromStr for SynthDtype {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bf16" => Ok(SynthDtype::BF16),
            "f16" => Ok(SynthDtype::F16),
            "f32" => Ok(SynthDtype::F32),
            _ => Err(format!("unknown dtype `{s}` (expected bf16, f16 or f32)")),
        }
    }
}

/// The float type a tensor's values are encoded in (None: an int64 table).
fn float_type(t: &TensorSpec, dtype: SynthDtype) -> Option<SynthDtype> {
    match t.stored {
        Stored::Model => Some(dtype),
        Stored::F32 => Some(SynthDtype::F32),
        Stored::I64 => None,
    }
}

/// Bytes per element of `t` in a checkpoint of `dtype`.
pub fn elem_size(t: &TensorSpec, dtype: SynthDtype) -> usize {
    float_type(t, dtype).map_or(8, SynthDtype::size)
}

fn safetensors_name(t: &TensorSpec, dtype: SynthDtype) -> &'static str {
    float_type(t, dtype).map_or("I64", SynthDtype::safetensors_name)
}

/// One output file and the tensors it holds (indices into the tensor list).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    pub file: String,
    pub tensors: Vec<usize>,
    /// Data-section bytes.
    pub bytes: u64,
}

/// Splits `tensors` into files of at most `max_bytes` of data each (a larger tensor gets a file
/// of its own), named `model.safetensors` when one file suffices, else
/// `model-0000i-of-0000N.safetensors`.
pub fn plan_shards(tensors: &[TensorSpec], dtype: SynthDtype, max_bytes: u64) -> Vec<Shard> {
    let mut shards: Vec<Shard> = Vec::new();
    for (i, t) in tensors.iter().enumerate() {
        let size = t.num_elems() * elem_size(t, dtype) as u64;
        match shards.last_mut() {
            Some(s) if s.bytes + size <= max_bytes || s.tensors.is_empty() => {
                s.tensors.push(i);
                s.bytes += size;
            }
            _ => shards.push(Shard { file: String::new(), tensors: vec![i], bytes: size }),
        }
    }
    let n = shards.len();
    for (i, s) in shards.iter_mut().enumerate() {
        s.file = match n {
            1 => "model.safetensors".into(),
            _ => format!("model-{:05}-of-{n:05}.safetensors", i + 1),
        };
    }
    shards
}

/// The header of `shard`: its JSON text padded to a multiple of 8 bytes, length included.
fn header(shard: &Shard, tensors: &[TensorSpec], dtype: SynthDtype) -> Vec<u8> {
    let mut h = Map::new();
    h.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut offset = 0u64;
    for &i in &shard.tensors {
        let t = &tensors[i];
        let end = offset + t.num_elems() * elem_size(t, dtype) as u64;
        h.insert(
            t.name.clone(),
            json!({"dtype": safetensors_name(t, dtype), "shape": t.shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let mut text = Value::Object(h).to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out
}

/// How many chunks one batch holds per thread.
const CHUNKS_PER_THREAD: usize = 16;

/// Writes `dir/shard.file`, generating each tensor chunk by chunk on `threads` threads.
pub fn write_shard(
    dir: &Path,
    shard: &Shard,
    tensors: &[TensorSpec],
    dtype: SynthDtype,
    seed: u64,
    threads: usize,
    progress: &dyn Progress,
) -> Result<(), CheckpointError> {
    let path = dir.join(&shard.file);
    let io = |e| CheckpointError::io(&path, e);
    let file = std::fs::File::create(&path).map_err(io)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    out.write_all(&header(shard, tensors, dtype)).map_err(io)?;
    progress.start(&format!("writing {}", shard.file), Some(shard.bytes));
    let mut buf = Vec::new();
    for &i in &shard.tensors {
        let t = &tensors[i];
        let size = elem_size(t, dtype);
        let hash = name_hash(&t.name);
        let num_chunks = (t.num_elems() as usize).div_ceil(CHUNK_ELEMS);
        let batch = threads.max(1) * CHUNKS_PER_THREAD;
        for first in (0..num_chunks).step_by(batch) {
            let elems =
                ((first + batch).min(num_chunks) * CHUNK_ELEMS).min(t.num_elems() as usize) - first * CHUNK_ELEMS;
            buf.resize(elems * size, 0);
            fill(&mut buf, t.init, float_type(t, dtype), seed, hash, first, threads);
            out.write_all(&buf).map_err(io)?;
            progress.advance(buf.len() as u64);
        }
    }
    out.flush().map_err(io)?;
    progress.finish();
    Ok(())
}

/// Fills `buf` with the chunks from `first_chunk` on, the chunks split over `threads` threads;
/// `float` is the encoding (None: int64 ids).
fn fill(
    buf: &mut [u8],
    init: Init,
    float: Option<SynthDtype>,
    seed: u64,
    hash: u64,
    first_chunk: usize,
    threads: usize,
) {
    let size = float.map_or(8, SynthDtype::size);
    let chunk_bytes = CHUNK_ELEMS * size;
    let fill_chunk = |chunk_idx: usize, bytes: &mut [u8]| match (init, float) {
        (Init::ExpertIds { num_experts, per_token }, _) => {
            for (k, b) in bytes.chunks_exact_mut(8).enumerate() {
                let at = chunk_idx * CHUNK_ELEMS + k;
                let id = (7 * (at / per_token) + at % per_token) % num_experts;
                b.copy_from_slice(&(id as i64).to_le_bytes());
            }
        }
        (_, None) => panic!("an int64 tensor holds expert ids only"),
        (Init::Ones, Some(dtype)) => {
            let mut one = [0u8; 4];
            dtype.encode(1.0, &mut one[..size]);
            bytes.chunks_exact_mut(size).for_each(|b| b.copy_from_slice(&one[..size]));
        }
        (Init::Zeros, Some(_)) => bytes.fill(0),
        (Init::Random { std }, Some(dtype)) => {
            let bell = Bell::with_std(std);
            let mut s = Stream::for_chunk(seed, hash, chunk_idx as u64);
            bytes.chunks_exact_mut(size).for_each(|b| dtype.encode(s.bell(&bell), b));
        }
    };
    let num_chunks = buf.len().div_ceil(chunk_bytes);
    if threads <= 1 || num_chunks <= 1 {
        for (k, c) in buf.chunks_mut(chunk_bytes).enumerate() {
            fill_chunk(first_chunk + k, c);
        }
        return;
    }
    let per_thread = num_chunks.div_ceil(threads);
    std::thread::scope(|scope| {
        for (t, part) in buf.chunks_mut(per_thread * chunk_bytes).enumerate() {
            let fill_chunk = &fill_chunk;
            scope.spawn(move || {
                for (k, c) in part.chunks_mut(chunk_bytes).enumerate() {
                    fill_chunk(first_chunk + t * per_thread + k, c);
                }
            });
        }
    });
}

/// `model.safetensors.index.json` of a sharded model.
pub fn index_json(shards: &[Shard], tensors: &[TensorSpec]) -> String {
    let mut names: Vec<(&str, &str)> =
        shards.iter().flat_map(|s| s.tensors.iter().map(|&i| (tensors[i].name.as_str(), s.file.as_str()))).collect();
    names.sort_unstable();
    let weight_map: Map<String, Value> = names.into_iter().map(|(n, f)| (n.to_string(), json!(f))).collect();
    let total: u64 = shards.iter().map(|s| s.bytes).sum();
    serde_json::to_string_pretty(&json!({"metadata": {"total_size": total}, "weight_map": weight_map}))
        .expect("JSON values serialize")
}
