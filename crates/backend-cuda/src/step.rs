//! One forward pass as the CUDA backend sees it: `begin_step` packs the batch's metadata (token
//! ids, KV slots, logits rows, attention positions and block tables) into pinned host memory and
//! uploads it with one copy, so ops read it from the device instead of uploading per op.
//! Decode-shaped steps (every row wants logits, at most 64 rows) are padded to a
//! bucket of rows (`BUCKETS`) and *recorded*: their launches are kept as data and submitted at the first
//! host read (`flush`) as a CUDA graph when one was captured from equal launches (`graph.rs`).
//! Invariants: a padded row is token 0 at position 0 of the KV cache's spare pad block, so it
//! reads and writes nothing a real row reads; no kernel reads across rows, so padding never
//! changes a real row. Pinned staging is rewritten only after the copies that read it finished.

use crate::kv::{CudaKvCache, attention_meta};
use crate::launch::Launch;
use cudarc::driver::{CudaEvent, CudaSlice, PinnedHostSlice};
use plumb_core::ForwardBatch;

/// The row buckets decode steps are padded to (and captured for); larger steps run eagerly.
pub const BUCKETS: [usize; 9] = [1, 2, 4, 8, 16, 24, 32, 48, 64];

/// The bucket a decode step of `num_rows` rows runs as.
pub fn bucket(num_rows: usize) -> Option<usize> {
    BUCKETS.iter().copied().find(|&b| b >= num_rows)
}

/// What a recorded step is keyed by: its padded row count and its KV cache.
pub type StepKey = (usize, u64);
/// What a graph is keyed by: its step's key and its segment's index within the step.
pub type GraphKey = (usize, u64, usize);

/// Launches per graph segment of a recorded step unless `PLUMB_CUDA_GRAPH_SEGMENT` says otherwise
/// (0: one graph per step). A recorded step is submitted in segments as it is recorded, so the
/// GPU runs the first layers while the host still records the rest: one graph per step left the
/// GPU idle while the host recorded and launched the whole step (one request on the 8B: 473 µs
/// recording and 153 µs launching a step of 5,245 µs of GPU time, in series;
/// receipts/bench-cuda-llama8b-attention-fold-graph-segments.txt). About seven layers of a Llama.
pub const SEGMENT_OPS: usize = 64;

/// The first segment's launches when segments ramp up (the default; `PLUMB_CUDA_GRAPH_RAMP=0`
/// cuts every segment at the segment length): the GPU idles while the host records a step's first
/// segment, so the first is short and each next one twice the last, up to the segment length, each
/// recorded while the one before runs. More graph launches a step against less of the first
/// segment's idle; on the H200 it won every run of one call, alternating with it off: the default
/// model's tg128 843–848 against 766–824 tokens/s (three rounds), the 8B's tg64 207.1 / 207.9
/// against 204.9 / 204.0 and 64 requests 6,954 / 7,038 against 6,868 / 6,912 steady
/// (receipts/bench-cuda-graph-ramp-session13.txt).
pub const RAMP_FIRST: usize = 8;

/// The launches that close segment `segment` of a recorded step: `segment_ops` (0: one graph per
/// step), or with `ramp` `RAMP_FIRST` doubling per segment up to it. A fixed function of the
/// segment's index, so equal steps cut equal segments and replay their graphs.
pub fn segment_limit(segment_ops: usize, ramp: bool, segment: usize) -> usize {
    if !ramp || segment_ops == 0 {
        return segment_ops;
    }
    RAMP_FIRST.checked_shl(segment.min(16) as u32).unwrap_or(usize::MAX).min(segment_ops)
}

/// One queued piece of device work. Nearly every op is a kernel launch, so the launch is kept
/// inline (a step's list is compared with a graph's, op by op) rather than boxed per launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)]
pub enum Op {
    Kernel(Launch),
    /// A copy of `bytes` from pinned host memory at `src` to device address `dst`.
    HtoD {
        dst: u64,
        src: usize,
        bytes: usize,
    },
}

/// The current step: the batch it was begun with and where its metadata sits on the device.
#[derive(Debug)]
pub struct Step {
    pub batch: ForwardBatch,
    /// The KV cache's identity (its first layer's K address).
    pub kv_id: u64,
    /// Real rows, and the rows every per-row tensor of the step is launched over.
    pub num_rows: usize,
    pub padded_rows: usize,
    /// Device addresses of the packed metadata (u32 arrays of `padded_rows` entries each, the
    /// attention metadata as `kv::attention_meta` packs it).
    pub ids: u64,
    pub slots: u64,
    pub logits_rows: u64,
    pub attn_meta: u64,
    /// Where this step's RoPE table is staged in pinned memory, and the bytes it may take (one
    /// table per step).
    pub rope_src: usize,
    pub rope_capacity: usize,
    pub rope_used: bool,
    /// `Some(key)` while the step's launches are being recorded for graphs, and the index of the
    /// segment being recorded.
    pub recording: Option<StepKey>,
    pub segment: usize,
    /// Whether the step is decode-shaped (`graph_bucket`), graphs on or off.
    pub decode_shaped: bool,
}

/// Pinned host staging and its device twin, grown as batches grow.
#[derive(Debug, Default)]
pub struct Staging {
    pub host: Option<PinnedHostSlice<u8>>,
    pub dev: Option<CudaSlice<u8>>,
    pub len: usize,
    /// Recorded after the last copy that reads `host`; waited on before `host` is rewritten.
    pub copies_done: Option<CudaEvent>,
}

/// The packed metadata of a step, in u32 words: ids, slots, logits rows (each `padded` long,
/// padded with token 0, the pad slot and the pad rows themselves), then the attention metadata.
pub fn pack(batch: &ForwardBatch, padded: usize, pad_block: u32, block_size: usize) -> (Vec<u32>, [usize; 4]) {
    let n = batch.num_rows();
    let pad_slot = pad_block * block_size as u32;
    let mut words = Vec::with_capacity(5 * padded + batch.lanes.iter().map(|l| l.block_table.len()).sum::<usize>() + 1);
    let ids_at = 0;
    words.extend_from_slice(&batch.token_ids);
    words.resize(padded, 0);
    let slots_at = words.len();
    words.extend_from_slice(&batch.slot_mapping);
    words.resize(slots_at + padded, pad_slot);
    let logits_at = words.len();
    words.extend_from_slice(&batch.logits_rows);
    words.extend((batch.logits_rows.len()..padded).map(|r| r.min(padded - 1) as u32));
    words.truncate(logits_at + padded.max(batch.logits_rows.len()));
    let attn_at = words.len();
    words.extend(attention_meta(batch, padded, pad_block));
    debug_assert!(n <= padded);
    (words, [ids_at, slots_at, logits_at, attn_at])
}

/// Whether `batch` is a decode-shaped step (every row wants logits, in order) that can replay a
/// graph, and the bucket it pads to.
pub fn graph_bucket(batch: &ForwardBatch) -> Option<usize> {
    let n = batch.num_rows();
    let in_order = batch.logits_rows.len() == n && batch.logits_rows.iter().enumerate().all(|(i, &r)| r as usize == i);
    if n == 0 || !in_order {
        return None;
    }
    bucket(n)
}

/// The KV cache's identity for graph keys.
pub fn kv_id(kv: &CudaKvCache) -> u64 {
    kv.k_ptrs.first().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_core::LaneView;

    #[test]
    fn ramped_segments_double_from_the_first_up_to_the_segment_length() {
        let limits: Vec<usize> = (0..6).map(|s| segment_limit(64, true, s)).collect();
        assert_eq!(limits, [8, 16, 32, 64, 64, 64]);
        assert_eq!(segment_limit(64, false, 0), 64);
        assert_eq!(segment_limit(0, true, 3), 0, "one graph a step stays one");
        assert_eq!(segment_limit(5, true, 0), 5);
        assert_eq!(segment_limit(64, true, 1000), 64);
    }

    #[test]
    fn buckets_cover_every_decode_size_up_to_the_largest() {
        assert_eq!(bucket(1), Some(1));
        assert_eq!(bucket(3), Some(4));
        assert_eq!(bucket(17), Some(24));
        assert_eq!(bucket(64), Some(64));
        assert_eq!(bucket(65), None);
    }

    #[test]
    fn pad_rows_point_at_token_zero_and_the_pad_block() {
        let mut b = ForwardBatch {
            block_size: 4,
            lanes: vec![LaneView { block_table: vec![7] }, LaneView { block_table: vec![2, 5] }],
            ..Default::default()
        };
        b.push_row(1, 11, 5);
        b.push_row(0, 12, 1);
        b.logits_rows = vec![0, 1];
        assert_eq!(graph_bucket(&b), Some(2));
        let (words, [ids, slots, logits, attn]) = pack(&b, 4, 9, 4);
        assert_eq!(&words[ids..ids + 4], &[11, 12, 0, 0]);
        assert_eq!(&words[slots..slots + 4], &[21, 29, 36, 36]);
        assert_eq!(&words[logits..logits + 4], &[0, 1, 2, 3]);
        // positions, then each row's table offset, then the tables (lane 0, lane 1, pad).
        assert_eq!(&words[attn..], &[5, 1, 0, 0, 1, 0, 3, 3, 7, 2, 5, 9]);
        b.logits_rows = vec![1];
        assert_eq!(graph_bucket(&b), None);
    }
}
