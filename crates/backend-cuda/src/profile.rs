//! Per-kernel GPU time, for finding what bounds a run (`PLUMB_CUDA_PROFILE=1`, which also turns
//! CUDA graphs off: every launch then runs eagerly through `submit`; `PLUMB_CUDA_PROFILE=decode`
//! times only the launches of decode-shaped steps, the ones graphs would replay, so a
//! concurrency run's decode is not buried under its prompts' prefill). Each launch is bracketed by
//! two CUDA events on the backend's stream; pending pairs are resolved in batches, and when the
//! backend is dropped it prints each kernel's launches, GPU time and share to stderr, widest first.
//! The events change no launch and no result, only add a little host time per launch.

use crate::graph::{Misses, Submitted};
use crate::launch::Launch;
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaStream, sys};
use std::collections::HashMap;
use std::sync::Arc;

/// Pairs of events kept before they are resolved (and their time summed).
const PENDING: usize = 4096;

#[derive(Debug, Default)]
pub struct Profiler {
    /// Whether only decode-shaped steps are timed.
    pub decode_only: bool,
    pending: Vec<(usize, CudaEvent, CudaEvent)>,
    /// Per kernel (its CUfunction): launches and milliseconds.
    totals: HashMap<usize, (u64, f64)>,
    /// Why some pending launches could not be timed, if they could not.
    lost: Option<String>,
}

impl Profiler {
    /// A profiler when `PLUMB_CUDA_PROFILE=1` (every launch) or `=decode` (decode-shaped steps').
    pub fn from_env() -> Option<Profiler> {
        match std::env::var("PLUMB_CUDA_PROFILE").as_deref() {
            Ok("1") => Some(Profiler::default()),
            Ok("decode") => Some(Profiler { decode_only: true, ..Default::default() }),
            _ => None,
        }
    }

    /// Runs `launch` on `stream` between two timing events.
    pub fn timed(
        &mut self,
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        launch: &Launch,
    ) -> Result<(), cudarc::driver::DriverError> {
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let (start, end) = (ctx.new_event(flags)?, ctx.new_event(flags)?);
        start.record(stream)?;
        // SAFETY: as for any launch of the backend (`graph::execute`).
        unsafe { launch.execute(stream.cu_stream()) }?;
        end.record(stream)?;
        self.pending.push((launch.func(), start, end));
        if self.pending.len() >= PENDING {
            self.resolve()?;
        }
        Ok(())
    }

    /// Sums the timed launches of earlier steps (called as a step starts, so the totals do not
    /// wait for the backend's drop, which may race the process's exit and the driver's teardown).
    pub fn settle(&mut self) {
        if let Err(e) = self.resolve() {
            self.lost = Some(e.to_string());
        }
    }

    fn resolve(&mut self) -> Result<(), cudarc::driver::DriverError> {
        for (func, start, end) in self.pending.drain(..) {
            end.synchronize()?;
            let t = self.totals.entry(func).or_default();
            t.0 += 1;
            t.1 += f64::from(start.elapsed_ms(&end)?);
        }
        Ok(())
    }

    /// The table of kernels by GPU time, named from `kernels`.
    pub fn report(&mut self, kernels: &HashMap<String, CudaFunction>) -> String {
        self.settle();
        let names: HashMap<usize, &str> = kernels.iter().map(|(n, f)| (f.cu_function() as usize, n.as_str())).collect();
        let mut rows: Vec<(&str, u64, f64)> =
            self.totals.iter().map(|(f, &(n, ms))| (names.get(f).copied().unwrap_or("?"), n, ms)).collect();
        rows.sort_by(|a, b| b.2.total_cmp(&a.2));
        let total: f64 = rows.iter().map(|r| r.2).sum();
        let what = if self.decode_only { "decode-shaped steps' kernels" } else { "kernels" };
        let mut out = format!("CUDA profile (PLUMB_CUDA_PROFILE): {total:.1} ms of {what}\n");
        if let Some(e) = &self.lost {
            out += &format!("(the last launches' times were lost: {e})\n");
        }
        out += &format!("{:<32} {:>9} {:>11} {:>9} {:>7}\n", "kernel", "launches", "total ms", "mean us", "share");
        for (name, n, ms) in rows {
            out += &format!(
                "{name:<32} {n:>9} {ms:>11.2} {:>9.1} {:>6.1}%\n",
                ms * 1e3 / n as f64,
                100.0 * ms / total.max(1e-12)
            );
        }
        out
    }
}

/// Where a recorded step's time goes (`PLUMB_CUDA_STEP_TIMES=1`; graphs stay on): per row
/// bucket, the wall time from one step's start to the next, the host time spent recording the
/// step's launches (from `begin_step` or the last segment's submission to each segment's), the
/// host time of the submissions themselves (graph launches, captures or the launches one by one),
/// and the GPU time of the submitted work (two events around each segment). A step's segments
/// overlap the host's recording of the next with the GPU's run of the last, so the wall may be
/// less than their sum; printed when the backend drops.
#[derive(Debug, Default)]
pub struct StepTimer {
    /// The current step's start and bucket, and when its last segment was submitted.
    started: Option<(std::time::Instant, usize)>,
    mark: Option<std::time::Instant>,
    /// Per segment: bucket, whether it is a step's first, record and submit µs, events.
    pending: Vec<(usize, bool, f64, f64, Submitted, CudaEvent, CudaEvent)>,
    totals: std::collections::BTreeMap<usize, BucketTimes>,
}

/// One row bucket's sums, in microseconds.
#[derive(Debug, Default)]
struct BucketTimes {
    /// Steps submitted, and those with a wall time (all but a run's last).
    steps: u64,
    walled: u64,
    wall: f64,
    record: f64,
    submit: f64,
    gpu: f64,
    /// Segments replayed, captured and run launch by launch.
    ways: [u64; 3],
}

impl StepTimer {
    pub fn from_env() -> Option<StepTimer> {
        std::env::var("PLUMB_CUDA_STEP_TIMES").is_ok_and(|v| v == "1").then(StepTimer::default)
    }

    /// A step starts (`bucket`: its rows if it is recorded); the previous one's wall time ends here.
    pub fn begin(&mut self, bucket: Option<usize>) {
        let now = std::time::Instant::now();
        self.mark = Some(now);
        if let Some((t, b)) = std::mem::replace(&mut self.started, bucket.map(|b| (now, b))) {
            let e = self.totals.entry(b).or_default();
            e.wall += (now - t).as_secs_f64() * 1e6;
            e.walled += 1;
        }
    }

    /// Runs `submit` (a recorded segment's submission; `first`: the step's first) between two
    /// events on `stream`.
    pub fn submit(
        &mut self,
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        first: bool,
        submit: impl FnOnce() -> Result<Submitted, cudarc::driver::DriverError>,
    ) -> Result<Submitted, cudarc::driver::DriverError> {
        let (Some((_, bucket)), Some(t0)) = (self.started, self.mark) else { return submit() };
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let (start, end) = (ctx.new_event(flags)?, ctx.new_event(flags)?);
        let t1 = std::time::Instant::now();
        start.record(stream)?;
        let way = submit()?;
        end.record(stream)?;
        let t2 = std::time::Instant::now();
        self.mark = Some(t2);
        let (record, submitted) = ((t1 - t0).as_secs_f64() * 1e6, (t2 - t1).as_secs_f64() * 1e6);
        self.pending.push((bucket, first, record, submitted, way, start, end));
        if self.pending.len() >= PENDING {
            self.resolve()?;
        }
        Ok(way)
    }

    fn resolve(&mut self) -> Result<(), cudarc::driver::DriverError> {
        for (bucket, first, record, submit, way, start, end) in self.pending.drain(..) {
            end.synchronize()?;
            let e = self.totals.entry(bucket).or_default();
            e.steps += u64::from(first);
            e.ways[way as usize] += 1;
            e.record += record;
            e.submit += submit;
            e.gpu += f64::from(start.elapsed_ms(&end)?) * 1e3;
        }
        Ok(())
    }

    /// The table of buckets: mean microseconds per step.
    pub fn report(&mut self) -> String {
        if let Err(e) = self.resolve() {
            return format!("CUDA step times unavailable: {e}\n");
        }
        let mut out = String::from("CUDA step times (PLUMB_CUDA_STEP_TIMES=1), mean us per recorded step\n");
        out += &format!(
            "{:>6} {:>8} {:>9} {:>9} {:>9} {:>9} {:>33}\n",
            "rows", "steps", "wall", "record", "submit", "gpu", "segments replayed/captured/eager"
        );
        for (bucket, t) in &self.totals {
            let n = t.steps.max(1) as f64;
            let ways = format!("{}/{}/{}", t.ways[0], t.ways[1], t.ways[2]);
            out += &format!(
                "{bucket:>6} {:>8} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {ways:>33}\n",
                t.steps,
                t.wall / t.walled.max(1) as f64,
                t.record / n,
                t.submit / n,
                t.gpu / n
            );
        }
        out
    }
}

/// The recorded steps that ran launch by launch although their key had a list before, grouped by
/// the first op that differed (`graph::Misses`), most frequent first, named from `kernels`.
pub fn misses_report(misses: &Misses, kernels: &HashMap<String, CudaFunction>) -> String {
    if misses.is_empty() {
        return String::new();
    }
    let names: HashMap<usize, &str> = kernels.iter().map(|(n, f)| (f.cu_function() as usize, n.as_str())).collect();
    let mut rows: Vec<_> = misses.iter().collect();
    rows.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let mut out =
        String::from("Recorded steps run launch by launch, by the first op that differed from the key's list\n");
    out += &format!("{:>6} {:>8} {:>6}  {:<32} {}\n", "rows", "steps", "op", "kernel", "what differed");
    for ((rows, op, func, what), n) in rows.into_iter().take(16) {
        let kernel = if *func == 0 { "(copy)" } else { names.get(func).copied().unwrap_or("?") };
        out += &format!("{rows:>6} {n:>8} {op:>6}  {kernel:<32} {what}\n");
    }
    out
}
