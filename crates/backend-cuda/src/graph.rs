//! CUDA graphs for recorded steps: per key (padded row count, KV cache, segment of the step), the
//! launches a graph was captured from. A recorded step whose launches equal them replays the graph; a step whose
//! launches equal the previous step's of that key (the pool's addresses have settled) is
//! captured; any other runs its launches one by one.
//! Invariant: a graph is launched only for a launch list equal to the one it was captured from,
//! so replay computes exactly what eager execution of the list computes, bit for bit.

use crate::step::{GraphKey, Op};
use cudarc::driver::{CudaGraph, CudaStream, DriverError, sys};
use std::collections::HashMap;
use std::sync::Arc;

/// How recorded steps were submitted (for tests, profiles and receipts), counted in graph segments
/// (`step::SEGMENT_OPS`: a step is one or more).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    pub num_captured: u64,
    pub num_replayed: u64,
    /// Recorded steps that ran launch by launch (first sight of a list, or a list that changed).
    pub num_eager: u64,
}

/// How one recorded step was submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submitted {
    Replayed,
    Captured,
    Eager,
}

/// Why recorded steps ran launch by launch although their key had a list before: per (rows of
/// the key, index of the first op that differed, its kernel's CUfunction or 0 for a copy, what
/// differed), how many steps. Kept for `PLUMB_CUDA_STEP_TIMES=1`'s report.
pub type Misses = HashMap<(usize, usize, usize, String), u64>;

/// The first op of `now` that differs from `before`: (its index, its kernel's CUfunction or 0,
/// what differs in words), or None when the lists are equal.
pub fn first_difference(now: &[Op], before: &[Op]) -> Option<(usize, usize, String)> {
    for (i, (a, b)) in now.iter().zip(before).enumerate() {
        let what = match (a, b) {
            (Op::Kernel(x), Op::Kernel(y)) => x.difference(y).map(|w| (x.func(), w)),
            (Op::HtoD { dst, src, bytes }, Op::HtoD { dst: d, src: s, bytes: n }) => {
                let w = if dst != d {
                    Some("copy destination")
                } else if src != s {
                    Some("copy source")
                } else if bytes != n {
                    Some("copy size")
                } else {
                    None
                };
                w.map(|w| (0, w.to_string()))
            }
            (Op::Kernel(x), Op::HtoD { .. }) => Some((x.func(), "a launch where a copy was".to_string())),
            (Op::HtoD { .. }, Op::Kernel(_)) => Some((0, "a copy where a launch was".to_string())),
        };
        if let Some((func, what)) = what {
            return Some((i, func, what));
        }
    }
    (now.len() != before.len())
        .then(|| (now.len().min(before.len()), 0, format!("{} ops against {}", now.len(), before.len())))
}

/// A graph and the launches it was captured from.
struct Captured {
    ops: Vec<Op>,
    graph: CudaGraph,
}

// SAFETY: cudarc's CudaGraph holds raw driver handles, which the driver lets any thread use as
// long as calls on one graph are not concurrent; every use goes through `Graphs`, which the
// backend only touches under its state mutex.
unsafe impl Send for Captured {}

#[derive(Default)]
struct Entry {
    /// The last list submitted for this key that had no graph.
    last: Vec<Op>,
    captured: Option<Captured>,
}

/// Every captured graph of one backend.
#[derive(Default)]
pub struct Graphs {
    entries: HashMap<GraphKey, Entry>,
    /// Shared so a receipt can read them after the backend has moved into an engine thread.
    pub stats: Arc<std::sync::Mutex<GraphStats>>,
    /// Set when a capture failed: graphs stay off for the rest of the backend's life.
    pub broken: bool,
    /// Why steps of a key that had a list ran eagerly (counted only when `track_misses`).
    pub misses: Misses,
    pub track_misses: bool,
    /// Launches per segment of a recorded step (`step::SEGMENT_OPS`; 0: one graph per step).
    pub segment_ops: usize,
    /// Whether a step's segments ramp up to `segment_ops` (`step::segment_limit`).
    pub ramp: bool,
}

fn count(stats: &std::sync::Mutex<GraphStats>, f: impl FnOnce(&mut GraphStats)) {
    f(&mut stats.lock().unwrap_or_else(|e| e.into_inner()));
}

impl std::fmt::Debug for Graphs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Graphs({} keys, {:?})", self.entries.len(), self.stats())
    }
}

impl Graphs {
    /// Runs a recorded step's `ops` on `stream`: by graph replay, by a fresh capture, or one by one.
    /// The counters now.
    pub fn stats(&self) -> GraphStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn submit(&mut self, key: GraphKey, ops: Vec<Op>, stream: &Arc<CudaStream>) -> Result<Submitted, DriverError> {
        let entry = self.entries.entry(key).or_default();
        if let Some(c) = &entry.captured
            && c.ops == ops
        {
            count(&self.stats, |s| s.num_replayed += 1);
            c.graph.launch()?;
            return Ok(Submitted::Replayed);
        }
        if !self.broken && entry.last == ops {
            match capture(&ops, stream) {
                Ok(graph) => {
                    if entry.captured.is_some() {
                        // The graph being replaced may still run; let it finish first.
                        stream.synchronize()?;
                    }
                    graph.launch()?;
                    entry.captured = Some(Captured { ops, graph });
                    entry.last.clear();
                    count(&self.stats, |s| s.num_captured += 1);
                    return Ok(Submitted::Captured);
                }
                Err(e) => {
                    self.broken = true;
                    eprintln!("warning: CUDA graph capture failed ({e}); steps run without graphs from now on");
                }
            }
        }
        for op in &ops {
            execute(op, stream)?;
        }
        if self.track_misses {
            // Against the graph when there is one, else against the last list.
            let before = entry.captured.as_ref().map_or(&entry.last, |c| &c.ops);
            if !before.is_empty()
                && let Some((i, func, what)) = first_difference(&ops, before)
            {
                *self.misses.entry((key.0, i, func, what)).or_default() += 1;
            }
        }
        entry.last = ops;
        count(&self.stats, |s| s.num_eager += 1);
        Ok(Submitted::Eager)
    }
}

/// Captures `ops` into an instantiated graph (nothing runs).
fn capture(ops: &[Op], stream: &Arc<CudaStream>) -> Result<CudaGraph, DriverError> {
    stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let queued = ops.iter().try_for_each(|op| execute(op, stream));
    // End the capture even when a launch failed, so the stream leaves capture mode.
    let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    queued?;
    graph?.ok_or(DriverError(sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED))
}

/// Queues one op on `stream`.
pub fn execute(op: &Op, stream: &CudaStream) -> Result<(), DriverError> {
    match *op {
        // SAFETY: launches are built by the ops in `ops.rs`, whose argument lists match their
        // kernels; their device addresses belong to tensors, weights, the KV cache or step
        // buffers that live until the stream has run the launch (the pool reuses memory only
        // for later work on this stream).
        Op::Kernel(l) => unsafe { l.execute(stream.cu_stream()) },
        // SAFETY: `src` is pinned staging of at least `bytes` bytes that is not rewritten before
        // the copy completes (`Staging::copies_done`); `dst` is a device buffer of that size.
        Op::HtoD { dst, src, bytes } => unsafe {
            sys::cuMemcpyHtoDAsync_v2(dst, src as *const std::ffi::c_void, bytes, stream.cu_stream()).result()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::first_difference;
    use crate::launch::test_launch;
    use crate::step::Op;

    #[test]
    fn the_first_difference_of_two_lists_is_named_with_its_place() {
        let a = [
            Op::Kernel(test_launch(1, 4).ptr(8)),
            Op::HtoD { dst: 16, src: 32, bytes: 64 },
            Op::Kernel(test_launch(2, 1)),
        ];
        assert_eq!(first_difference(&a, &a), None);
        let mut b = a;
        b[2] = Op::Kernel(test_launch(2, 1).i32(5));
        assert_eq!(first_difference(&b, &a), Some((2, 2, "argument count".into())));
        b = a;
        b[1] = Op::HtoD { dst: 16, src: 40, bytes: 64 };
        assert_eq!(first_difference(&b, &a), Some((1, 0, "copy source".into())));
        b = a;
        b[0] = Op::Kernel(test_launch(1, 4).ptr(9));
        assert_eq!(first_difference(&b, &a), Some((0, 1, "argument 0".into())));
        assert_eq!(first_difference(&a[..2], &a), Some((2, 0, "2 ops against 3".into())));
        assert_eq!(first_difference(&a[1..], &a).map(|d| (d.0, d.2)), Some((0, "a copy where a launch was".into())));
    }
}
