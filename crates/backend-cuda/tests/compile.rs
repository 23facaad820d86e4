//! The kernel sources compile with NVRTC for Hopper (sm_90a), and ptxas keeps every wgmma
//! pipeline — checked wherever NVRTC is installed, with or without a GPU; skipped where it is not.

use plumb_backend_cuda::{CudaBackend, CudaError};

#[test]
fn kernels_compile_for_hopper() {
    // A private cache, so this run really compiles.
    let home = std::env::temp_dir().join(format!("plumb-nvrtc-test-{}", std::process::id()));
    // SAFETY: this test binary holds one test, so no other thread reads the environment meanwhile.
    unsafe { std::env::set_var("PLUMB_HOME", &home) };
    match CudaBackend::compile_kernels("sm_90a") {
        Err(CudaError::NoNvrtc) => eprintln!("kernels_compile_for_hopper: skipped, NVRTC is not installed"),
        Err(e) => panic!("{e}"),
        Ok((image, cached)) => {
            assert!(!cached, "a fresh PLUMB_HOME has no cached kernels");
            assert!(image.starts_with(b"\x7fELF"), "NVRTC returned no CUBIN");
            let (again, cached) = CudaBackend::compile_kernels("sm_90a").unwrap();
            assert!(cached && again == image, "the second compile comes from the disk cache");
            eprintln!("kernels_compile_for_hopper: {} bytes of sm_90a CUBIN", image.len());
            // ptxas keeps every wgmma pipeline: a kernel that touches an accumulator while its
            // group may be in flight, or issues a group on some paths only, has all its wgmma
            // serialized (C7514 / C7515; docs/cuda-prefill-attention.md).
            let log = CudaBackend::kernel_compile_log("sm_90a").unwrap();
            let serialized: Vec<&str> = log.lines().filter(|l| l.contains("are serialized")).collect();
            assert!(serialized.is_empty(), "ptxas serialized wgmma:\n{}", serialized.join("\n"));
        }
    }
    let _ = std::fs::remove_dir_all(&home);
}
