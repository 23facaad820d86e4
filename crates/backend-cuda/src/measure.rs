//! What the roofline columns of `plumb bench` are measured with: the backend's counts of the
//! bytes its ops read and of the floating-point operations they do, the device's copy bandwidth
//! (a device-to-device copy), and its dense bf16 matrix-multiply rate (cuBLASLt, the vendor's
//! own, on random data: the rate a prefill's FLOPs are held to). None of it computes a result.

use crate::{CudaBackend, CudaError, driver};
use cudarc::driver::CudaSlice;
use std::sync::atomic::{AtomicU64, Ordering};

/// The work the backend's ops have done since it started: bytes of weights and KV read (each
/// weight of a `linear` once per call, K and V of every attended position once per row: what a
/// step must stream) and floating-point operations (2 per multiply-add of a `linear`, 4 per
/// attended position and head dimension of attention: q·k and p·v). Shared, so it can be read
/// after the backend has moved into an engine thread.
#[derive(Debug, Default)]
pub struct WorkCounters {
    bytes: AtomicU64,
    flops: AtomicU64,
}

impl WorkCounters {
    pub fn bytes_read(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
    pub fn flops(&self) -> u64 {
        self.flops.load(Ordering::Relaxed)
    }
    pub(crate) fn add(&self, bytes: u64, flops: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.flops.fetch_add(flops, Ordering::Relaxed);
    }
}

/// Floating-point operations of a `linear` of `rows` rows through a weight of `features` ×
/// `k`: a multiply and an add per weight element and row.
pub(crate) fn linear_flops(rows: usize, features: usize, k: usize) -> u64 {
    2 * (rows * features * k) as u64
}

/// Floating-point operations of attention over `attended` (row, position) pairs in all (Σ of
/// each row's position + 1) for `heads` query heads of `head_dim`: q·k and p·v, a multiply and
/// an add each per dimension.
pub(crate) fn attention_flops(attended: u64, heads: usize, head_dim: usize) -> u64 {
    4 * attended * (heads * head_dim) as u64
}

/// The side of the square bf16 product the matrix-multiply rate is timed on.
const RATE_SIDE: usize = 8192;

impl CudaBackend {
    /// The work counters (`WorkCounters`), shared.
    pub fn work_counters(&self) -> std::sync::Arc<WorkCounters> {
        self.work.clone()
    }

    /// The device's copy bandwidth in bytes per second (read + written), measured now with a
    /// 1 GiB device-to-device copy: the roofline a decode step's bytes are held to.
    pub fn copy_bandwidth(&self) -> Result<f64, CudaError> {
        let n = 1usize << 30;
        let src = self.stream.alloc_zeros::<u8>(n).map_err(driver("allocating the bandwidth probe"))?;
        let mut dst = self.stream.alloc_zeros::<u8>(n).map_err(driver("allocating the bandwidth probe"))?;
        let copy = |dst: &mut CudaSlice<u8>| self.stream.memcpy_dtod(&src, dst).map_err(driver("copying"));
        copy(&mut dst)?;
        self.stream.synchronize().map_err(driver("synchronizing"))?;
        let reps = 10;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            copy(&mut dst)?;
        }
        self.stream.synchronize().map_err(driver("synchronizing"))?;
        Ok(2.0 * (n * reps) as f64 / t.elapsed().as_secs_f64())
    }

    /// The device's dense bf16 matrix-multiply rate in FLOP/s (bf16 inputs and output, f32
    /// accumulation), measured now: cuBLASLt multiplies an 8,192 × 8,192 matrix of random values
    /// in [-1, 1) by its own transpose ten times after three unmeasured ones. cuBLASLt is loaded
    /// for this only (the backend's own `linear` never calls it); without the library this says so.
    pub fn bf16_matmul_rate(&self) -> Result<f64, CudaError> {
        use cudarc::cublaslt::{CudaBlasLT, Matmul, MatmulConfig};
        // SAFETY: only looks for the shared library; loads no symbol.
        if !unsafe { cudarc::cublaslt::sys::is_culib_present() } {
            return Err(CudaError::NoCublasLt);
        }
        let lt = CudaBlasLT::new(self.stream.clone())
            .map_err(|e| CudaError::CublasLt { during: "creating a handle", message: format!("{e:?}") })?;
        let n = RATE_SIDE;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = || {
            // xorshift64*: values in [-1, 1), bf16 by truncation (exact enough for a timing).
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let u = (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as f32 / (1u64 << 24) as f32;
            half::bf16::from_f32(2.0 * u - 1.0)
        };
        let host: Vec<half::bf16> = (0..n * n).map(|_| random()).collect();
        // One random matrix as both operands (A · Aᵀ): the rate does not depend on which values.
        let a = self.stream.clone_htod(&host).map_err(driver("uploading the rate probe"))?;
        let mut c = self.stream.alloc_zeros::<half::bf16>(n * n).map_err(driver("allocating the rate probe"))?;
        let cfg = MatmulConfig {
            transa: true,
            transb: false,
            transc: false,
            m: n as u64,
            n: n as u64,
            k: n as u64,
            alpha: 1.0,
            lda: n as i64,
            ldb: n as i64,
            beta: 0.0,
            ldc: n as i64,
            stride_a: None,
            stride_b: None,
            stride_c: None,
            stride_bias: None,
            batch_size: None,
        };
        let mut run = |reps: usize| -> Result<f64, CudaError> {
            let t = std::time::Instant::now();
            for _ in 0..reps {
                // SAFETY: a and c hold exactly the n × n matrices `cfg` describes.
                unsafe { lt.matmul(cfg, &a, &a, &mut c, None, None) }
                    .map_err(|e| CudaError::CublasLt { during: "multiplying", message: format!("{e:?}") })?;
            }
            self.stream.synchronize().map_err(driver("synchronizing"))?;
            Ok(t.elapsed().as_secs_f64())
        };
        run(3)?;
        let reps = 10;
        let secs = run(reps)?;
        Ok(2.0 * (n as f64).powi(3) * reps as f64 / secs)
    }
}

#[cfg(test)]
mod tests {
    use super::{WorkCounters, attention_flops, linear_flops};

    #[test]
    fn counters_add_up_what_the_ops_report() {
        let w = WorkCounters::default();
        // One row through the 8B's q|k|v (6,144 × 4,096 bf16), then its attention over 512
        // positions with 32 heads of 128.
        w.add(6144 * 4096 * 2, linear_flops(1, 6144, 4096));
        w.add(512 * 2 * 8 * 128 * 2, attention_flops(512, 32, 128));
        assert_eq!(w.bytes_read(), 50_331_648 + 2_097_152);
        assert_eq!(w.flops(), 50_331_648 + 8_388_608);
        // A 2,048-row prefill of the same weight: FLOPs grow with the rows, bytes do not.
        assert_eq!(linear_flops(2048, 6144, 4096), 2048 * linear_flops(1, 6144, 4096));
    }
}
