//! The device the GPU tests run on, or a clean skip: CI and most developer machines have no GPU.
#![allow(dead_code)]

use plumb_backend_cuda::CudaBackend;

/// The CUDA backend on device 0 (or $PLUMB_CUDA_DEVICE), or `None` after printing why the test
/// is skipped. Set PLUMB_REQUIRE_GPU=1 to turn a missing GPU into a failure (the GPU machine's
/// script does, so a broken setup cannot pass as skips).
pub fn backend(test: &str) -> Option<CudaBackend> {
    let ordinal = std::env::var("PLUMB_CUDA_DEVICE").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    match CudaBackend::new(ordinal) {
        Ok(b) => {
            eprintln!(
                "{test}: on {} (kernels {})",
                plumb_core::Backend::name(&b),
                if b.kernels_cached { "from the disk cache" } else { "compiled now" }
            );
            Some(b)
        }
        Err(e) if std::env::var("PLUMB_REQUIRE_GPU").is_ok_and(|v| v == "1") => panic!("{test}: no GPU: {e}"),
        Err(e) => {
            eprintln!("{test}: skipped, no GPU: {e}");
            None
        }
    }
}

/// A fresh seed per run, printed so a failure can be replayed with PLUMB_SEED.
pub fn seed() -> u64 {
    let seed = std::env::var("PLUMB_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("seed: {seed} (replay with PLUMB_SEED={seed})");
    seed
}
