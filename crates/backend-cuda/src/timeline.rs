//! Every kernel's blocks stamped with the GPU's global nanosecond timer, for where a step's time
//! goes with CUDA graphs and programmatic dependent launch on (`PLUMB_CUDA_TIMELINE=FILE`). The
//! event timer of `profile.rs` brackets each launch on its own, so it turns graphs off and sees no
//! overlap; these stamps are taken inside the kernels of the graphs that run. The kernels are
//! compiled with `-DPLUMB_TIMELINE` (their own cached CUBIN): `TL_BLOCK`, each kernel's first
//! statement (kernels/dequant.cu), reads `%globaltimer` as a block's thread 0 starts and again as
//! it returns, and while `plumb_tl_on` is set appends the launch's `%gridid`, a hash of the
//! kernel's name, the block's index, both times and when its PDL wait returned to `plumb_tl`. No
//! arithmetic changes. A graph's replays keep each node's `%gridid` (seen on an H100), so
//! `plumb_tl_on` holds the recorded step's number, stored beside each block: a launch is
//! (step, grid).
//!
//! `PLUMB_CUDA_TIMELINE_STEPS=FROM:COUNT` (default 40:8) records decode-shaped steps FROM to
//! FROM + COUNT − 1 (counted from the backend's first); when the backend is dropped, the blocks go
//! to FILE as CSV and a summary per kernel to stderr (`tools/device/timeline.py` reads the CSV).

use crate::CudaError;
use cudarc::driver::{CudaModule, CudaStream, DevicePtr, DriverError, result};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

/// Blocks one timeline holds (kernels/dequant.cu's `TL_CAP`), and the words of a block's record.
pub const CAP: usize = 1 << 20;
const WORDS: usize = 5;

/// Whether the kernels are to be built with their time stamps.
pub fn wanted() -> bool {
    std::env::var_os("PLUMB_CUDA_TIMELINE").is_some_and(|v| !v.is_empty())
}

/// FNV-1a of a kernel's name: the hash `TL_BLOCK` stores beside each block.
pub fn name_hash(name: &str) -> u32 {
    name.bytes().fold(2_166_136_261u32, |h, b| (h ^ u32::from(b)).wrapping_mul(16_777_619))
}

/// One block of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockStamp {
    /// The recorded step (0 for the window's first) and its launch's `%gridid`: together, the launch.
    pub step: u32,
    pub grid: u64,
    /// `name_hash` of its kernel.
    pub kernel: u32,
    /// The block's linear index in its grid.
    pub block: u32,
    /// `%globaltimer` as the block's thread 0 started and as it returned.
    pub start_ns: u64,
    pub end_ns: u64,
    /// `%globaltimer` as thread 0's wait on the kernel before (PDL) returned; 0 if it did not wait.
    pub wait_ns: u64,
}

/// The module's stamp buffer and the steps it records.
#[derive(Debug)]
pub struct Timeline {
    on: u64,
    count: u64,
    stamps: u64,
    /// Decode-shaped steps before recording starts, and how many it records.
    from: usize,
    steps: usize,
    seen: usize,
    path: Option<PathBuf>,
}

fn symbol(module: &Arc<CudaModule>, stream: &Arc<CudaStream>, name: &str) -> Result<u64, DriverError> {
    let view = module.get_global(name, stream)?;
    let (ptr, _sync) = view.device_ptr(stream);
    Ok(ptr)
}

impl Timeline {
    /// The timeline of `module` when `PLUMB_CUDA_TIMELINE` is set (its kernels built with stamps).
    pub fn attach(module: &Arc<CudaModule>, stream: &Arc<CudaStream>) -> Result<Option<Timeline>, CudaError> {
        if !wanted() {
            return Ok(None);
        }
        let (from, steps) = match std::env::var("PLUMB_CUDA_TIMELINE_STEPS") {
            Err(_) => (40, 8),
            Ok(v) => v.split_once(':').and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?))).ok_or(
                CudaError::BadSetting {
                    name: "PLUMB_CUDA_TIMELINE_STEPS",
                    value: v.clone(),
                    expected: "FROM:COUNT, decode-shaped steps",
                },
            )?,
        };
        let find = |name| symbol(module, stream, name).map_err(crate::driver("finding the timeline's buffers"));
        let path = std::env::var_os("PLUMB_CUDA_TIMELINE").map(PathBuf::from).filter(|p| p.as_os_str() != "1");
        Ok(Some(Timeline {
            on: find("plumb_tl_on")?,
            count: find("plumb_tl_n")?,
            stamps: find("plumb_tl")?,
            from,
            steps,
            seen: 0,
            path,
        }))
    }

    /// Records the launches queued on `stream` after this as step `step` − 1, or (0) none.
    fn set_recording(&self, stream: &Arc<CudaStream>, step: u32) -> Result<(), DriverError> {
        let flag = [step];
        // SAFETY: `on` is the module's 4-byte `plumb_tl_on`; a copy from pageable memory is staged
        // before the call returns, so `flag` may go.
        unsafe { result::memcpy_htod_async(self.on, &flag, stream.cu_stream()) }
    }

    /// A step starts (no capture in progress): decode-shaped steps FROM to FROM + COUNT − 1 are
    /// recorded, each under its own number; recording goes off at the next decode-shaped step.
    pub fn begin_step(&mut self, stream: &Arc<CudaStream>, decode_shaped: bool) -> Result<(), DriverError> {
        if !decode_shaped {
            return Ok(());
        }
        if (self.from..self.from + self.steps).contains(&self.seen) {
            self.set_recording(stream, (self.seen - self.from + 1) as u32)?;
        } else if self.seen == self.from + self.steps {
            self.set_recording(stream, 0)?;
        }
        self.seen += 1;
        Ok(())
    }

    /// The blocks recorded so far (waits for `stream`), and how many more did not fit.
    pub fn read(&self, stream: &Arc<CudaStream>) -> Result<(Vec<BlockStamp>, usize), DriverError> {
        stream.synchronize()?;
        let mut n = [0u32];
        // SAFETY: `count` is the module's 4-byte `plumb_tl_n` and `stamps` its WORDS × CAP words;
        // the stream is idle, so nothing writes them meanwhile.
        unsafe { result::memcpy_dtoh_async(&mut n, self.count, stream.cu_stream()) }?;
        stream.synchronize()?;
        let kept = (n[0] as usize).min(CAP);
        let mut words = vec![0u64; WORDS * kept];
        if kept > 0 {
            // SAFETY: as above; `words` holds the first `kept` records.
            unsafe { result::memcpy_dtoh_async(&mut words, self.stamps, stream.cu_stream()) }?;
            stream.synchronize()?;
        }
        let stamps = words
            .chunks_exact(WORDS)
            .map(|r| BlockStamp {
                step: ((r[0] >> 48) as u32).saturating_sub(1),
                grid: r[0] & 0xffff_ffff_ffff,
                kernel: (r[1] >> 32) as u32,
                block: r[1] as u32,
                start_ns: r[2],
                end_ns: r[3],
                wait_ns: r[4],
            })
            .collect();
        Ok((stamps, n[0] as usize - kept))
    }

    /// Writes the recorded blocks to the file named by `PLUMB_CUDA_TIMELINE` (if it names one) and
    /// returns the per-kernel summary, names from `names`.
    pub fn finish(&self, stream: &Arc<CudaStream>, names: &[&str]) -> String {
        let (stamps, lost) = match self.read(stream) {
            Ok(r) => r,
            Err(e) => return format!("CUDA timeline: not read ({e})\n"),
        };
        let names = by_hash(names);
        let name = |h: u32| names.get(&h).copied().unwrap_or("?");
        let mut out = String::new();
        if let Some(path) = &self.path {
            let mut csv = String::from("step,grid,kernel,block,start_ns,end_ns,wait_ns\n");
            for s in &stamps {
                let (k, b) = (name(s.kernel), s.block);
                let _ = writeln!(csv, "{},{},{k},{b},{},{},{}", s.step, s.grid, s.start_ns, s.end_ns, s.wait_ns);
            }
            match std::fs::write(path, csv) {
                Ok(()) => {
                    let _ = writeln!(out, "CUDA timeline: {} blocks written to {}", stamps.len(), path.display());
                }
                Err(e) => {
                    let _ = writeln!(out, "CUDA timeline: writing {}: {e}", path.display());
                }
            }
        }
        if lost > 0 {
            let _ = writeln!(out, "CUDA timeline: {lost} more blocks did not fit its {CAP}");
        }
        out + &summary(&stamps, &names)
    }
}

/// Kernel names by `name_hash`.
fn by_hash<'a>(names: &[&'a str]) -> HashMap<u32, &'a str> {
    names.iter().map(|n| (name_hash(n), *n)).collect()
}

/// Launches per kernel with their mean span (first block's start to last block's end), widest
/// total first.
pub fn summary(stamps: &[BlockStamp], names: &HashMap<u32, &str>) -> String {
    let name = |h: u32| names.get(&h).copied().unwrap_or("?");
    // Each launch's span.
    let mut launches: HashMap<(u32, u64), (u32, u64, u64)> = HashMap::new();
    for s in stamps {
        let l = launches.entry((s.step, s.grid)).or_insert((s.kernel, u64::MAX, 0));
        l.1 = l.1.min(s.start_ns);
        l.2 = l.2.max(s.end_ns);
    }
    let mut per: HashMap<u32, (usize, u64)> = HashMap::new();
    for (kernel, start, end) in launches.values() {
        let k = per.entry(*kernel).or_default();
        k.0 += 1;
        k.1 += end.saturating_sub(*start);
    }
    let mut rows: Vec<_> = per.into_iter().collect();
    rows.sort_by_key(|(_, (_, total))| std::cmp::Reverse(*total));
    let mut out = format!("CUDA timeline: {} launches, {} blocks\n", launches.len(), stamps.len());
    let _ = writeln!(out, "{:<34}{:>9}{:>12}{:>10}", "kernel", "launches", "total ms", "mean us");
    for (kernel, (n, total)) in rows {
        let _ = writeln!(
            out,
            "{:<34}{n:>9}{:>12.2}{:>10.1}",
            name(kernel),
            total as f64 / 1e6,
            total as f64 / 1e3 / n as f64
        );
    }
    out
}

impl crate::CudaBackend {
    /// Under `PLUMB_CUDA_TIMELINE`, every block recorded so far (after the queued work is done).
    pub fn timeline_stamps(&self) -> Result<Vec<BlockStamp>, CudaError> {
        let mut st = self.lock_state();
        self.flush_locked(&mut st);
        match st.timeline.as_ref() {
            Some(t) => t.read(&self.stream).map(|(s, _)| s).map_err(crate::driver("reading the timeline")),
            None => Ok(Vec::new()),
        }
    }

    /// Under `PLUMB_CUDA_TIMELINE`, the summary per kernel of what was recorded so far (the one
    /// printed when the backend is dropped).
    pub fn timeline_summary(&self) -> Result<String, CudaError> {
        let stamps = self.timeline_stamps()?;
        let names: Vec<&str> = self.kernels.keys().map(String::as_str).collect();
        Ok(summary(&stamps, &by_hash(&names)))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_hash_as_the_kernels_do() {
        // FNV-1a's published values.
        assert_eq!(super::name_hash(""), 0x811c_9dc5);
        assert_eq!(super::name_hash("a"), 0xe40c_292c);
    }
}
