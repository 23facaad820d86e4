//! CUDA graphs for recorded steps: per key (padded row count, KV cache), the launches a graph was
//! captured from. A recorded step whose launches equal them replays the graph; a step whose
//! launches equal the previous step's of that key (the pool's addresses have settled) is
//! captured; any other runs its launches one by one.
//! Invariant: a graph is launched only for a launch list equal to the one it was captured from,
//! so replay computes exactly what eager execution of the list computes, bit for bit.

use crate::step::{GraphKey, Op};
use cudarc::driver::{CudaGraph, CudaStream, DriverError, sys};
use std::collections::HashMap;
use std::sync::Arc;

/// How recorded steps were submitted (for tests, profiles and receipts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    pub num_captured: u64,
    pub num_replayed: u64,
    /// Recorded steps that ran launch by launch (first sight of a list, or a list that changed).
    pub num_eager: u64,
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

    pub fn submit(&mut self, key: GraphKey, ops: Vec<Op>, stream: &Arc<CudaStream>) -> Result<(), DriverError> {
        let entry = self.entries.entry(key).or_default();
        if let Some(c) = &entry.captured
            && c.ops == ops
        {
            count(&self.stats, |s| s.num_replayed += 1);
            return c.graph.launch();
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
                    return Ok(());
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
        entry.last = ops;
        count(&self.stats, |s| s.num_eager += 1);
        Ok(())
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
