//! The activation memory pool: a caching allocator, so an op's output tensor costs no driver
//! call once the pool is warm (a decode step used to make ~270 stream-ordered allocations, frees
//! and memsets). Owns device buffers in size classes; does not own weights or the KV cache.
//! Invariants: a buffer is handed out to one tensor at a time, and all work runs on one stream,
//! so a buffer freed by the host is reused only by work queued after the work that read it.
//! `take` returns the lowest free address of a class, so the same sequence of allocations and
//! frees from the same free set yields the same addresses — what lets a recorded decode step
//! match its CUDA graph (`graph.rs`) step after step.

use cudarc::driver::{CudaContext, DriverError, result};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// The smallest class; allocations below it round up.
const MIN_CLASS: usize = 256;

/// The class an allocation of `bytes` takes: quarter steps between powers of two (at most 25%
/// unused), so prefill steps of varying row counts share classes instead of growing the pool.
pub fn class_of(bytes: usize) -> usize {
    let b = bytes.max(MIN_CLASS);
    let pow = b.next_power_of_two();
    // Steps of a quarter of pow/2 between pow/2 and pow.
    let step = pow / 8;
    b.div_ceil(step) * step
}

/// Free buffers by class and every buffer the pool owns.
#[derive(Debug)]
pub struct Pool {
    /// Kept alive until the last buffer is freed (tensors may outlive the backend).
    ctx: Arc<CudaContext>,
    free: HashMap<usize, BTreeSet<u64>>,
    owned: HashMap<u64, usize>,
    /// Allocations served from the free lists / by the driver (for profiles and tests).
    pub num_hits: u64,
    pub num_misses: u64,
}

impl Pool {
    pub fn new(ctx: Arc<CudaContext>) -> Pool {
        Pool { ctx, free: HashMap::new(), owned: HashMap::new(), num_hits: 0, num_misses: 0 }
    }

    /// A free buffer of `class` bytes (the lowest address), or a fresh one from the driver.
    pub fn take(&mut self, class: usize) -> Result<u64, DriverError> {
        if let Some(set) = self.free.get_mut(&class)
            && let Some(ptr) = set.pop_first()
        {
            self.num_hits += 1;
            return Ok(ptr);
        }
        self.ctx.bind_to_thread()?;
        // SAFETY: a plain synchronous allocation (never stream-ordered, so never captured into
        // a graph); the pointer is owned by the pool until `release` or drop frees it.
        let ptr = unsafe { result::malloc_sync(class) }?;
        self.owned.insert(ptr, class);
        self.num_misses += 1;
        Ok(ptr)
    }

    /// Returns a buffer taken from this pool.
    pub fn put(&mut self, class: usize, ptr: u64) {
        debug_assert_eq!(self.owned.get(&ptr), Some(&class));
        self.free.entry(class).or_default().insert(ptr);
    }

    /// Gives every free buffer back to the driver (on out-of-memory). The caller has synchronized
    /// the stream and flushed recorded work, so no queued or recorded kernel reads a free buffer.
    pub fn release(&mut self) {
        if self.ctx.bind_to_thread().is_err() {
            return;
        }
        for (_, set) in self.free.drain() {
            for ptr in set {
                self.owned.remove(&ptr);
                // SAFETY: `ptr` came from malloc_sync, is free (no tensor holds it), and no work
                // that uses it is pending (see above).
                let _ = unsafe { result::free_sync(ptr) };
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Tensors hold an Arc of the pool, so every buffer is free by now.
        self.release();
    }
}

/// A buffer lent by the pool; returned to it on drop.
#[derive(Debug)]
pub struct DeviceBuf {
    pub(crate) ptr: u64,
    /// Which hand-out of `ptr` this is (unique in the process): a later buffer at the same address
    /// is a different tensor.
    pub(crate) lease: u64,
    class: usize,
    pool: Arc<Mutex<Pool>>,
}

static LEASES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl DeviceBuf {
    pub fn new(pool: &Arc<Mutex<Pool>>, bytes: usize) -> Result<DeviceBuf, DriverError> {
        let class = class_of(bytes);
        let ptr = pool.lock().expect("pool lock").take(class)?;
        let lease = LEASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(DeviceBuf { ptr, lease, class, pool: pool.clone() })
    }
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        if let Ok(mut p) = self.pool.lock() {
            p.put(self.class, self.ptr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::class_of;

    #[test]
    fn classes_round_up_by_at_most_a_quarter() {
        assert_eq!(class_of(1), 256);
        assert_eq!(class_of(256), 256);
        assert_eq!(class_of(257), 320);
        assert_eq!(class_of(4 * 576), 2560);
        assert_eq!(class_of(4096), 4096);
        for bytes in [300usize, 1000, 2305, 49152 * 4, 4096 * 1536 * 4 + 3] {
            let c = class_of(bytes);
            assert!(c >= bytes && (c - bytes) * 4 <= bytes, "{bytes} -> {c}");
        }
    }
}
