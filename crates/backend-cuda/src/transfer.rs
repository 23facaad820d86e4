//! Device memory of the CUDA backend's ops: activation buffers from the caching pool (with one
//! retry after handing the pool's free buffers back on out-of-memory), uploads of per-step
//! metadata and host data, and downloads, all ordered on the backend's one stream (recorded work
//! is submitted before any transfer that could overtake it).

use crate::pool::DeviceBuf;
use crate::{CudaBackend, CudaTensor};

impl CudaBackend {
    /// A pool buffer of `bytes` (at least one byte). On out-of-memory, the pool's free buffers go
    /// back to the driver and the allocation is tried once more; failing again panics with the
    /// sizes. The engine's start-up profile (`Backend::profiles_memory`) turns that panic into an
    /// error before serving; past it, a step needs no more than the profiled one did.
    pub(crate) fn alloc(&self, bytes: usize) -> DeviceBuf {
        match DeviceBuf::new(&self.pool, bytes) {
            Ok(b) => b,
            Err(_) => {
                self.synchronize();
                self.pool.lock().expect("pool lock").release();
                DeviceBuf::new(&self.pool, bytes).unwrap_or_else(|e| {
                    let mib = |b: usize| b as f64 / (1u64 << 20) as f64;
                    let free = self
                        .ctx
                        .bind_to_thread()
                        .ok()
                        .and_then(|_| cudarc::driver::result::mem_get_info().ok())
                        .map_or(String::new(), |(free, total)| {
                            format!(" ({:.0} of {:.0} MiB free)", mib(free), mib(total))
                        });
                    panic!("out of device memory: an activation of {:.1} MiB{free}: {e}", mib(bytes))
                })
            }
        }
    }

    /// `words` in a fresh pool buffer, copied now (recorded work is submitted first, so the copy
    /// cannot overtake a recorded kernel that read the buffer's previous contents).
    pub(crate) fn upload_words(&self, words: &[u32]) -> DeviceBuf {
        self.flush();
        let buf = self.alloc(words.len() * 4);
        self.copy_in(buf.ptr, words);
        buf
    }

    /// Copies host data to device address `dst` (pageable memory: the driver stages it before
    /// returning, so `data` may go right after).
    pub(crate) fn copy_in<T>(&self, dst: u64, data: &[T]) {
        if data.is_empty() {
            return;
        }
        self.ctx.bind_to_thread().expect("CUDA context");
        // SAFETY: `dst` is a live device buffer of at least `size_of_val(data)` bytes (the caller
        // allocated it for `data`), and every write to it is ordered on this stream.
        unsafe { cudarc::driver::result::memcpy_htod_async(dst, data, self.stream.cu_stream()) }
            .expect("CUDA upload failed");
    }

    /// `n` words from device address `src`, after the queued work that writes them.
    pub(crate) fn download_words(&self, src: u64, n: usize) -> Vec<u32> {
        self.download_from(src, n)
    }

    pub(crate) fn download_from<T: Copy + Default>(&self, src: u64, n: usize) -> Vec<T> {
        self.flush();
        let mut v = vec![T::default(); n];
        if !v.is_empty() {
            self.ctx.bind_to_thread().expect("CUDA context");
            // SAFETY: the caller's buffer at `src` holds at least `n` values of T; the stream is
            // synchronized before `v` is read or dropped.
            unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut v, src, self.stream.cu_stream()) }
                .expect("CUDA download failed");
        }
        self.stream.synchronize().expect("CUDA download failed");
        v
    }

    pub(crate) fn new_tensor(&self, rows: usize, cols: usize) -> CudaTensor {
        let padded_rows = self.padded_rows(rows);
        CudaTensor { rows, cols, padded_rows, buf: self.alloc(padded_rows * cols * 4) }
    }
}
