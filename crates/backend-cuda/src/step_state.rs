//! The backend's mutable step state and the three moves on it: `begin_step_on` (pack and upload
//! the batch's metadata, decide whether the step is recorded), `submit` (run a launch now, or
//! record it) and `flush` (hand a recorded step to `graph::Graphs` at the first host read).
//! Invariant: while a step is recorded, nothing is copied into pool memory outside the record
//! (uploads flush first), so recorded launches see exactly the data eager ones would.

use crate::graph::{self, Graphs};
use crate::kv::CudaKvCache;
use crate::launch::Launch;
use crate::step::{self, Op, Staging, Step};
use crate::{CudaBackend, CudaTensor};
use cudarc::driver::DevicePtrMut;
use plumb_core::ForwardBatch;
use std::sync::MutexGuard;

/// Everything a step changes; behind the backend's mutex.
#[derive(Debug, Default)]
pub struct State {
    pub step: Option<Step>,
    pub staging: Staging,
    pub recorded: Vec<Op>,
    pub graphs: Graphs,
    /// Per-kernel GPU time under `PLUMB_CUDA_PROFILE=1` (`profile`).
    pub profile: Option<crate::profile::Profiler>,
    /// Host and GPU time per recorded step under `PLUMB_CUDA_STEP_TIMES=1` (`profile`).
    pub step_times: Option<crate::profile::StepTimer>,
    /// The bf16 copy `rms_norm` wrote of its output with it, while no launch has followed.
    pub rounded: Option<Rounded>,
    /// The blocks' time stamps under `PLUMB_CUDA_TIMELINE` (`timeline`).
    pub timeline: Option<crate::timeline::Timeline>,
}

/// A norm's output as `round_bf16` makes it, written by the norm kernel itself.
#[derive(Debug)]
pub struct Rounded {
    /// The output tensor's buffer (address and lease) and shape.
    pub src: (u64, u64),
    pub padded_rows: usize,
    pub cols: usize,
    pub buf: crate::pool::DeviceBuf,
}

/// The bytes a step's metadata copy moves for `words` words: whole 4 KiB granules. The block
/// tables grow by a word whenever a lane crosses a KV block (every 16 tokens; at 64 staggered
/// lanes, about every step), and a copy of the exact size made each step's launch list differ from
/// the last, so decode steps ran launch by launch instead of replaying their graph. Rounded, the
/// copy (and the RoPE table staged after it) changes once every 1,024 words.
pub(crate) fn meta_copy_bytes(words: usize) -> usize {
    (words * 4).next_multiple_of(META_GRANULE)
}
const META_GRANULE: usize = 4096;

/// Bytes of pinned staging a step reserves for its RoPE table after the metadata.
fn rope_bytes(padded_rows: usize, head_dim: usize) -> usize {
    padded_rows * head_dim * 4
}

impl CudaBackend {
    pub(crate) fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("CUDA backend state lock")
    }

    /// The rows a new tensor of `rows` rows is launched over: the step's padded rows for a
    /// per-row tensor of the current step, else `rows`.
    pub(crate) fn padded_rows(&self, rows: usize) -> usize {
        match &self.lock_state().step {
            Some(s) if s.num_rows == rows => s.padded_rows,
            _ => rows,
        }
    }

    /// Reads the current step's metadata through `f` when there is a step.
    pub(crate) fn with_step<T>(&self, f: impl FnOnce(&Step) -> Option<T>) -> Option<T> {
        self.lock_state().step.as_ref().and_then(f)
    }

    /// Runs `launch` now, or records it while the step is recorded.
    pub(crate) fn submit(&self, launch: Launch) {
        let mut st = self.lock_state();
        // A launch may write the norm's output, so its rounded copy is valid only up to here.
        let stale = st.rounded.take();
        if let Some(segment) = st.step.as_ref().filter(|s| s.recording.is_some()).map(|s| s.segment) {
            st.recorded.push(Op::Kernel(launch));
            let limit = crate::step::segment_limit(st.graphs.segment_ops, st.graphs.ramp, segment);
            if limit > 0 && st.recorded.len() >= limit {
                self.submit_segment(&mut st, false);
            }
            return;
        }
        self.ctx.bind_to_thread().expect("CUDA context");
        let decode_shaped = st.step.as_ref().is_some_and(|s| s.decode_shaped);
        if let Some(p) = st.profile.as_mut().filter(|p| decode_shaped || !p.decode_only) {
            p.timed(&self.ctx, &self.stream, &launch).unwrap_or_else(|e| panic!("CUDA launch failed: {e}"));
            return;
        }
        drop(st);
        drop(stale);
        graph::execute(&Op::Kernel(launch), &self.stream).unwrap_or_else(|e| panic!("CUDA launch failed: {e}"));
    }

    /// Keeps `buf`, the bf16 copy of `out` the launch just submitted wrote, for the next launch.
    pub(crate) fn keep_rounded(&self, out: &CudaTensor, buf: crate::pool::DeviceBuf) {
        let rounded = Rounded { src: (out.buf.ptr, out.buf.lease), padded_rows: out.padded_rows, cols: out.cols, buf };
        self.lock_state().rounded = Some(rounded);
    }

    /// The bf16 copy of `x` if a norm wrote it with `x` and nothing has been launched since.
    pub(crate) fn take_rounded(&self, x: &CudaTensor) -> Option<crate::pool::DeviceBuf> {
        let mut st = self.lock_state();
        let r = st.rounded.as_ref()?;
        if r.src != (x.buf.ptr, x.buf.lease) || r.padded_rows != x.padded_rows || r.cols != x.cols {
            return None;
        }
        st.rounded.take().map(|r| r.buf)
    }

    /// Sets the launches per graph segment of a recorded step (`step::SEGMENT_OPS`, or
    /// `PLUMB_CUDA_GRAPH_SEGMENT`; 0: one graph per step); takes effect at the next segment.
    pub fn set_graph_segment(&self, launches: usize) {
        self.lock_state().graphs.segment_ops = launches;
    }

    /// The launches per graph segment of a recorded step (0: one graph per step).
    pub fn graph_segment(&self) -> usize {
        self.lock_state().graphs.segment_ops
    }

    /// Whether a recorded step's segments ramp up to the segment length (`step::segment_limit`;
    /// on unless `PLUMB_CUDA_GRAPH_RAMP=0`); takes effect at the next segment.
    pub fn set_graph_ramp(&self, on: bool) {
        self.lock_state().graphs.ramp = on;
    }

    pub fn graph_ramp(&self) -> bool {
        self.lock_state().graphs.ramp
    }

    /// Submits a recorded step (graph replay, capture, or launch by launch); the rest of the step
    /// runs eagerly.
    pub(crate) fn flush(&self) {
        let mut st = self.lock_state();
        self.flush_locked(&mut st);
    }

    pub(crate) fn flush_locked(&self, st: &mut State) {
        self.submit_segment(st, true);
    }

    /// Submits what a recorded step has recorded since its last segment as its next segment (a
    /// graph of its own, keyed by the segment's index); `last`: the step's recording ends.
    fn submit_segment(&self, st: &mut State, last: bool) {
        let Some(s) = st.step.as_mut() else { return };
        let Some((rows, kv)) = s.recording else { return };
        if last {
            s.recording = None;
        }
        let key = (rows, kv, s.segment);
        s.segment += 1;
        let ops = std::mem::take(&mut st.recorded);
        if ops.is_empty() {
            return;
        }
        self.ctx.bind_to_thread().expect("CUDA context");
        let (graphs, timer) = (&mut st.graphs, &mut st.step_times);
        let submitted = match timer {
            Some(t) => t.submit(&self.ctx, &self.stream, key.2 == 0, || graphs.submit(key, ops, &self.stream)),
            None => graphs.submit(key, ops, &self.stream),
        };
        submitted.unwrap_or_else(|e| panic!("CUDA step submission failed: {e}"));
        if let Some(ev) = &st.staging.copies_done {
            ev.record(&self.stream).expect("CUDA event record");
        }
    }

    /// Starts a step: packs `batch`'s metadata (padded to the graph bucket for decode-shaped
    /// steps when graphs are on), copies it to the device in one transfer, and starts recording
    /// if the step is graph-shaped.
    pub(crate) fn begin_step_on(&self, batch: &ForwardBatch, kv: &CudaKvCache) {
        let mut st = self.lock_state();
        self.flush_locked(&mut st);
        self.ctx.bind_to_thread().expect("CUDA context");
        let decode_bucket = step::graph_bucket(batch);
        let bucket = if self.graphs_enabled() && !st.graphs.broken { decode_bucket } else { None };
        let (n, pad_block) = (batch.num_rows(), kv.pad_block());
        let padded = bucket.unwrap_or(n);
        if let Some(t) = st.step_times.as_mut() {
            t.begin(bucket);
        }
        if let Some(p) = st.profile.as_mut() {
            p.settle();
        }
        if let Some(t) = st.timeline.as_mut() {
            // No capture is in progress here: the flag's copy is ordered among the launches.
            t.begin_step(&self.stream, decode_bucket.is_some()).expect("CUDA timeline flag");
        }
        let (words, [ids, slots, logits, attn]) = step::pack(batch, padded, pad_block, kv.spec.block_size);
        let meta_bytes = meta_copy_bytes(words.len());
        let need = meta_bytes + rope_bytes(padded, kv.spec.head_dim);
        let staging = &mut st.staging;
        if let Some(ev) = &staging.copies_done {
            // The previous step's copies read the staging we are about to rewrite.
            ev.synchronize().expect("CUDA event synchronize");
        }
        if staging.len < need {
            let len = need.next_power_of_two().max(1 << 16);
            // Queued work may still read the old device buffer.
            self.stream.synchronize().expect("CUDA stream synchronize");
            // SAFETY: pinned staging is written before it is read (below and in `rope_table`).
            staging.host = Some(unsafe { self.ctx.alloc_pinned_with_flags::<u8>(len, 0) }.expect("pinned allocation"));
            // SAFETY: the device twin is written by the copies from staging before any kernel reads it.
            staging.dev = Some(unsafe { self.stream.alloc::<u8>(len) }.expect("CUDA allocation of step metadata"));
            staging.len = len;
        }
        if staging.copies_done.is_none() {
            staging.copies_done = Some(self.ctx.new_event(None).expect("CUDA event"));
        }
        let host = staging.host.as_mut().expect("staging allocated");
        let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        // The granule's tail is copied too: zeros, never read.
        bytes.resize(meta_bytes, 0);
        host.as_mut_slice().expect("pinned staging")[..bytes.len()].copy_from_slice(&bytes);
        let src = host.as_ptr().expect("pinned staging") as usize;
        let dev = staging.dev.as_mut().expect("staging allocated").device_ptr_mut(&self.stream).0;
        let at = |word: usize| dev + 4 * word as u64;
        let recording = bucket.map(|b| (b, step::kv_id(kv)));
        st.step = Some(Step {
            batch: batch.clone(),
            kv_id: step::kv_id(kv),
            num_rows: n,
            padded_rows: padded,
            ids: at(ids),
            slots: at(slots),
            logits_rows: at(logits),
            attn_meta: at(attn),
            rope_src: src + meta_bytes,
            rope_capacity: rope_bytes(padded, kv.spec.head_dim),
            rope_used: false,
            recording,
            segment: 0,
            decode_shaped: decode_bucket.is_some(),
        });
        self.push_copy(&mut st, Op::HtoD { dst: dev, src, bytes: bytes.len() });
    }

    /// Queues (or records) a copy out of pinned staging, and marks the staging busy until it ran.
    fn push_copy(&self, st: &mut State, op: Op) {
        if st.step.as_ref().is_some_and(|s| s.recording.is_some()) {
            st.recorded.push(op);
            return;
        }
        graph::execute(&op, &self.stream).expect("CUDA upload failed");
        if let Some(ev) = &st.staging.copies_done {
            ev.record(&self.stream).expect("CUDA event record");
        }
    }

    /// The step's RoPE table for `positions` ([num_rows, 2 · half], padded rows at position 0),
    /// staged in pinned memory and copied with the step; `None` when `positions` are not the
    /// step's or its table slot is taken (the caller then uploads it directly).
    pub(crate) fn step_rope_table(&self, positions: &[u32], inv_freq: &[f64]) -> Option<CudaTensor> {
        let half = inv_freq.len();
        let (padded, src) = {
            let st = self.lock_state();
            let s = st.step.as_ref()?;
            let fits = s.padded_rows * 2 * half * 4 <= s.rope_capacity;
            if s.rope_used || !fits || s.batch.positions != positions {
                return None;
            }
            (s.padded_rows, s.rope_src)
        };
        let t = self.new_tensor(positions.len(), 2 * half);
        debug_assert_eq!(t.padded_rows, padded);
        let table = rope_rows(positions, padded, inv_freq);
        let mut st = self.lock_state();
        let host = st.staging.host.as_mut().expect("a step has staging");
        let base = host.as_ptr().expect("pinned staging") as usize;
        let bytes: Vec<u8> = table.iter().flat_map(|v| v.to_le_bytes()).collect();
        host.as_mut_slice().expect("pinned staging")[src - base..src - base + bytes.len()].copy_from_slice(&bytes);
        st.step.as_mut().expect("checked above").rope_used = true;
        self.push_copy(&mut st, Op::HtoD { dst: t.ptr(), src, bytes: bytes.len() });
        Some(t)
    }
}

/// cos then sin of `positions[n] · inv_freq[i]` in f64, rounded to f32, for `padded` rows
/// (rows past `positions` at position 0): the one table every path reads.
pub fn rope_rows(positions: &[u32], padded: usize, inv_freq: &[f64]) -> Vec<f32> {
    let half = inv_freq.len();
    let mut table = vec![0f32; padded * 2 * half];
    for (r, row) in table.chunks_exact_mut(2 * half.max(1)).enumerate().take(padded) {
        let p = positions.get(r).copied().unwrap_or(0) as f64;
        for (i, &f) in inv_freq.iter().enumerate() {
            let angle = p * f;
            row[i] = angle.cos() as f32;
            row[half + i] = angle.sin() as f32;
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::meta_copy_bytes;

    #[test]
    fn a_growing_block_table_keeps_the_metadata_copy_the_same_size() {
        // 64 decode rows: ids, slots, logits rows (64 words each), then per row its position and
        // table offset and its tables: 36 blocks of 16 tokens at ~576 positions.
        let base = 3 * 64 + 2 * 64 + 64 * 36;
        let sizes: Vec<usize> = (0..64).map(|grown| meta_copy_bytes(base + grown)).collect();
        assert!(sizes.iter().all(|&s| s == sizes[0]), "{sizes:?}");
        for words in [0, 1, 1023, 1024, 1025, 100_000] {
            let b = meta_copy_bytes(words);
            assert!(b >= words * 4 && b.is_multiple_of(4096) && b - words * 4 < 4096, "{words}: {b}");
        }
    }
}
