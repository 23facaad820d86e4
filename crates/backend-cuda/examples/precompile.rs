//! Compiles the kernels into plumb's kernel cache on a machine without a GPU, for a GPU machine
//! that would otherwise spend a minute of its time in NVRTC: with the GPU machine's NVRTC
//! version loaded (the cache key holds NVRTC's major.minor; the PyPI wheel nvidia-cuda-nvrtc of
//! that version serves), the CUBIN lands in `$PLUMB_HOME/kernels` under the name the backend
//! looks for there. Carry that folder and point PLUMB_HOME at its parent.
//!
//!   LD_LIBRARY_PATH=…/nvidia/cu13/lib PLUMB_HOME=DIR cargo run --example precompile [sm_90a]

fn main() {
    let arch = std::env::args().nth(1).unwrap_or_else(|| "sm_90a".into());
    match plumb_backend_cuda::CudaBackend::compile_kernels(&arch) {
        Ok((image, cached)) => {
            let how = if cached { "already cached" } else { "compiled" };
            println!("{arch}: {} bytes of CUBIN, {how}", image.len());
        }
        Err(e) => {
            eprintln!("precompile: {e}");
            std::process::exit(1);
        }
    }
}
