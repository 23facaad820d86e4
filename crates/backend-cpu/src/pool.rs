//! A small persistent thread pool for kernels: `run(f)` calls `f(thread_idx, num_threads)` on
//! every thread (the caller is thread 0) and returns when all are done. Workers spin briefly
//! between jobs (a decode step launches hundreds of kernels, each a few microseconds long), then
//! park so an idle engine burns no CPU.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

type Job = dyn Fn(usize, usize) + Sync;

/// How long an idle worker spins before parking.
const SPIN: Duration = Duration::from_micros(200);

struct Shared {
    /// The current job as a thin pointer to a fat pointer on the caller's stack.
    job: AtomicPtr<&'static Job>,
    epoch: AtomicUsize,
    done: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    num_threads: usize,
    sleepers: Mutex<Vec<Option<Thread>>>,
}

/// The pool. Dropping it stops the workers.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serializes `run` calls from different threads.
    run_lock: Mutex<()>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.shared.num_threads;
        write!(f, "Pool({n} thread{})", if n == 1 { "" } else { "s" })
    }
}

impl Pool {
    /// A pool of `num_threads` threads in all, the caller included.
    pub fn new(num_threads: usize) -> Self {
        let num_threads = num_threads.max(1);
        let shared = Arc::new(Shared {
            job: AtomicPtr::new(std::ptr::null_mut()),
            epoch: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            num_threads,
            sleepers: Mutex::new(vec![None; num_threads]),
        });
        let workers = (1..num_threads)
            .map(|idx| {
                let shared = shared.clone();
                thread::Builder::new()
                    .name(format!("plumb-cpu-{idx}"))
                    .spawn(move || worker(&shared, idx))
                    .expect("spawning a kernel thread")
            })
            .collect();
        Pool { shared, workers, run_lock: Mutex::new(()) }
    }

    pub fn num_threads(&self) -> usize {
        self.shared.num_threads
    }

    /// Runs `f(thread_idx, num_threads)` on every thread and waits for all of them.
    pub fn run<'a>(&self, f: &'a (dyn Fn(usize, usize) + Sync + 'a)) {
        let n = self.shared.num_threads;
        if n == 1 {
            return f(0, 1);
        }
        let _guard = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the job reference is only dereferenced by workers between the epoch bump below
        // and their `done` increment, and this function does not return (or unwind) before every
        // worker has incremented `done`; so the erased lifetime never outlives `f`.
        let job: &'static Job =
            unsafe { std::mem::transmute::<&'a (dyn Fn(usize, usize) + Sync + 'a), &'static Job>(f) };
        let mut slot = job;
        self.shared.done.store(0, Ordering::Relaxed);
        self.shared.job.store(&mut slot, Ordering::Relaxed);
        self.shared.epoch.fetch_add(1, Ordering::Release);
        for t in self.shared.sleepers.lock().unwrap_or_else(|e| e.into_inner()).iter().flatten() {
            t.unpark();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0, n)));
        let mut spins = 0u32;
        while self.shared.done.load(Ordering::Acquire) < n - 1 {
            // On a busy machine a worker may be descheduled: stop hogging its core.
            spins = spins.saturating_add(1);
            if spins < 4096 {
                std::hint::spin_loop();
            } else {
                thread::yield_now();
            }
        }
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if self.shared.panicked.swap(false, Ordering::Relaxed) {
            panic!("a kernel panicked on a worker thread");
        }
    }
}

fn worker(shared: &Shared, idx: usize) {
    let mut seen = 0usize;
    loop {
        let start = Instant::now();
        let mut spins = 0u32;
        let epoch = loop {
            let e = shared.epoch.load(Ordering::Acquire);
            if e != seen || shared.shutdown.load(Ordering::Relaxed) {
                break e;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && start.elapsed() > SPIN {
                shared.sleepers.lock().unwrap_or_else(|e| e.into_inner())[idx] = Some(thread::current());
                if shared.epoch.load(Ordering::Acquire) == seen && !shared.shutdown.load(Ordering::Relaxed) {
                    thread::park_timeout(Duration::from_millis(50));
                }
                shared.sleepers.lock().unwrap_or_else(|e| e.into_inner())[idx] = None;
            } else if spins > 4096 {
                thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        };
        if shared.shutdown.load(Ordering::Relaxed) {
            return;
        }
        seen = epoch;
        // SAFETY: `run` published a valid job pointer before bumping the epoch (Release/Acquire)
        // and keeps it alive until `done` reaches num_threads - 1.
        let job: &Job = unsafe { *shared.job.load(Ordering::Relaxed) };
        if catch_unwind(AssertUnwindSafe(|| job(idx, shared.num_threads))).is_err() {
            shared.panicked.store(true, Ordering::Relaxed);
        }
        shared.done.fetch_add(1, Ordering::Release);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Relaxed);
        self.shared.epoch.fetch_add(1, Ordering::Release);
        for w in &self.workers {
            w.thread().unpark();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// The `idx`-th of `n` near-equal contiguous parts of `0..len`, aligned to `align`.
pub fn split_range(len: usize, idx: usize, n: usize, align: usize) -> std::ops::Range<usize> {
    let units = len.div_ceil(align);
    let start = (units * idx / n * align).min(len);
    let end = (units * (idx + 1) / n * align).min(len);
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_runs_each_job() {
        let pool = Pool::new(3);
        for round in 0..1000 {
            let hits = AtomicUsize::new(0);
            pool.run(&|idx, n| {
                assert_eq!(n, 3);
                hits.fetch_add(idx + 1, Ordering::Relaxed);
            });
            assert_eq!(hits.load(Ordering::Relaxed), 6, "round {round}");
        }
    }

    #[test]
    fn split_range_covers_exactly() {
        for len in [0, 1, 7, 64, 100] {
            let parts: Vec<_> = (0..3).map(|i| split_range(len, i, 3, 4)).collect();
            assert_eq!(parts[0].start, 0);
            assert_eq!(parts[2].end, len);
            assert!(parts.windows(2).all(|w| w[0].end == w[1].start));
        }
    }
}
