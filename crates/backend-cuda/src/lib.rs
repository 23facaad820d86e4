//! plumb-backend-cuda: the CUDA backend. Kernels are CUDA C++ (`src/kernels/*.cu`) compiled by
//! NVRTC at run time for the device's architecture and cached on disk (`compile`); the driver and
//! NVRTC are loaded at run time, so the crate builds, and its tests skip, on machines without CUDA.
//! Activations, weights (in their checkpoint format) and the paged KV cache (f32) live on the
//! device; all work runs in order on one stream.
//! Invariant (GPU.md): every op has one canonical arithmetic per output element, fixed by the op,
//! the dtypes and the model's shapes — never by the number of rows, a row's place in the batch,
//! chunking or the launch shape — so row r of any batch is bit-identical to that row alone.
//! Device failures inside an op (out of memory, a faulted kernel) panic with the driver's error:
//! the backend traits are infallible today (see `CudaError`).

mod compile;
mod kv;
mod ops;

pub use kv::CudaKvCache;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DriverError, LaunchConfig};
use plumb_core::{Backend, BackendError, GgmlType, KvSpec, Shape, WeightSource};
use std::collections::HashMap;
use std::sync::Arc;

/// Why the CUDA backend could not start. Errors during a step panic instead, because the backend
/// traits are infallible; making allocation and transfer fallible is the planned trait reshape.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no CUDA driver found (libcuda.so could not be loaded): --device cuda needs an NVIDIA GPU and its driver")]
    NoDriver,
    #[error("no CUDA device {ordinal}: the driver reports {count} device(s)")]
    NoDevice { ordinal: usize, count: usize },
    #[error(
        "NVRTC (libnvrtc.so) could not be loaded: plumb compiles its CUDA kernels at run time and needs the CUDA toolkit's NVRTC on the library path"
    )]
    NoNvrtc,
    #[error("CUDA driver call failed while {during}: {source}")]
    Driver { during: &'static str, source: DriverError },
    #[error("NVRTC failed while {during} ({code}){}", if log.is_empty() { String::new() } else { format!(":\n{log}") })]
    Nvrtc { during: &'static str, code: String, log: String },
}

fn driver(during: &'static str) -> impl FnOnce(DriverError) -> CudaError {
    move |source| CudaError::Driver { during, source }
}

/// An activation tensor on the device: [rows, cols] f32, row-major.
#[derive(Debug)]
pub struct CudaTensor {
    pub rows: usize,
    pub cols: usize,
    pub(crate) buf: CudaSlice<f32>,
}

impl Shape for CudaTensor {
    fn rows(&self) -> usize {
        self.rows
    }
    fn cols(&self) -> usize {
        self.cols
    }
}

/// A weight on the device in its checkpoint format; vectors (norm weights, biases) are also kept
/// dequantized to f32.
#[derive(Debug)]
pub struct CudaWeight {
    pub name: String,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub(crate) row_bytes: usize,
    pub(crate) bytes: CudaSlice<u8>,
    pub(crate) dense: Option<CudaSlice<f32>>,
}

impl Shape for CudaWeight {
    fn rows(&self) -> usize {
        self.rows
    }
    fn cols(&self) -> usize {
        self.cols
    }
}

/// The CUDA backend on one device.
#[derive(Debug)]
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    _module: Arc<CudaModule>,
    kernels: HashMap<String, CudaFunction>,
    device_name: String,
    arch: String,
    driver_version: i32,
    nvrtc_version: (i32, i32),
    /// Whether the kernels came from the disk cache (false: NVRTC compiled them now).
    pub kernels_cached: bool,
}

/// Formats with kernels: every format plumb dequantizes exactly.
fn type_suffix(ty: GgmlType) -> Option<&'static str> {
    use GgmlType::*;
    Some(match ty {
        F32 => "f32",
        F16 => "f16",
        BF16 => "bf16",
        Q4_0 => "q4_0",
        Q4_1 => "q4_1",
        Q5_0 => "q5_0",
        Q5_1 => "q5_1",
        Q8_0 => "q8_0",
        Q2_K => "q2_k",
        Q3_K => "q3_k",
        Q4_K => "q4_k",
        Q5_K => "q5_k",
        Q6_K => "q6_k",
        _ => return None,
    })
}

/// Every kernel the module defines.
fn kernel_names() -> Vec<String> {
    let mut names: Vec<String> =
        ["rms_norm", "add", "add_bias", "silu_mul", "rope", "rope_rotate_half", "gather_rows", "write_kv", "attention"]
            .map(String::from)
            .into();
    for ty in GgmlType::DEQUANTIZABLE {
        let s = type_suffix(ty).expect("every dequantizable type has kernels");
        names.push(format!("linear_{s}"));
        names.push(format!("embed_{s}"));
    }
    names
}

impl CudaBackend {
    /// The backend on device `ordinal`: loads the driver and NVRTC, creates the context, and
    /// compiles (or loads from the disk cache) the kernels for the device's architecture.
    pub fn new(ordinal: usize) -> Result<CudaBackend, CudaError> {
        // SAFETY: probing loads the driver library by its standard names; nothing else is called.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(CudaError::NoDriver);
        }
        let count = match CudaContext::device_count() {
            Ok(n) => n.max(0) as usize,
            Err(e) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE => 0,
            Err(e) => return Err(driver("initializing the driver")(e)),
        };
        if ordinal >= count {
            return Err(CudaError::NoDevice { ordinal, count });
        }
        // SAFETY: as above, for NVRTC.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(CudaError::NoNvrtc);
        }
        let ctx = CudaContext::new(ordinal).map_err(driver("creating the context"))?;
        // SAFETY: the backend uses one stream only, so no buffer is ever shared between streams and
        // the cross-stream events cudarc would record are not needed.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        let (major, minor) = ctx.compute_capability().map_err(driver("reading the compute capability"))?;
        let arch = compile::arch_name(major, minor);
        let (image, kernels_cached) = compile::cubin(&arch)?;
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(image)).map_err(driver("loading the kernels"))?;
        let mut kernels = HashMap::new();
        for name in kernel_names() {
            let f = module.load_function(&name).map_err(driver("finding a kernel"))?;
            kernels.insert(name, f);
        }
        let device_name = ctx.name().map_err(driver("reading the device name"))?;
        let mut driver_version = 0;
        // SAFETY: the driver is loaded and initialized (a context exists); the out-pointer is a valid local.
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) }
            .result()
            .map_err(driver("reading the driver version"))?;
        let nvrtc_version = compile::nvrtc_version()?;
        Ok(CudaBackend {
            ctx,
            stream,
            _module: module,
            kernels,
            device_name,
            arch,
            driver_version,
            nvrtc_version,
            kernels_cached,
        })
    }

    /// The kernel module compiled for `arch` (e.g. `sm_90a`) with no device involved: checks that
    /// the sources compile wherever NVRTC is installed. Returns the CUBIN and whether it came
    /// from the disk cache.
    pub fn compile_kernels(arch: &str) -> Result<(Vec<u8>, bool), CudaError> {
        // SAFETY: probing loads NVRTC by its standard names; nothing else is called.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(CudaError::NoNvrtc);
        }
        compile::cubin(arch)
    }

    /// The device's name as the driver reports it.
    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    /// The architecture the kernels were compiled for (`sm_90a` on an H200).
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The CUDA version the driver supports, as `major.minor` (e.g. `13.0`).
    pub fn driver_version(&self) -> String {
        format!("{}.{}", self.driver_version / 1000, self.driver_version % 1000 / 10)
    }

    /// The NVRTC (toolkit) version that compiled the kernels, as `major.minor`.
    pub fn nvrtc_version(&self) -> String {
        format!("{}.{}", self.nvrtc_version.0, self.nvrtc_version.1)
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// Waits until every queued kernel has finished (timing needs it; downloads do it themselves).
    pub fn synchronize(&self) {
        self.stream.synchronize().expect("CUDA stream synchronize failed");
    }

    pub(crate) fn kernel(&self, name: &str) -> &CudaFunction {
        self.kernels.get(name).unwrap_or_else(|| panic!("no CUDA kernel `{name}`"))
    }

    pub(crate) fn upload_u32(&self, data: &[u32]) -> CudaSlice<u32> {
        let data = if data.is_empty() { &[0u32][..] } else { data };
        self.stream.clone_htod(data).expect("CUDA upload failed")
    }

    fn alloc(&self, len: usize) -> CudaSlice<f32> {
        // Zero-sized allocations are not allowed by the driver; a one-element buffer stands in.
        self.stream.alloc_zeros::<f32>(len.max(1)).expect("CUDA allocation failed (out of device memory?)")
    }
}

/// A 1-D launch of `n` threads in blocks of 256.
pub(crate) fn grid_1d(n: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (n.div_ceil(256).max(1) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;
    type Weight = CudaWeight;
    type KvCache = CudaKvCache;

    fn name(&self) -> String {
        format!("cuda:{} ({}, {})", self.ctx.ordinal(), self.device_name, self.arch)
    }

    fn kind(&self) -> &'static str {
        "cuda"
    }

    fn supports(&self, ty: GgmlType) -> bool {
        type_suffix(ty).is_some()
    }

    fn load_weight(&self, src: WeightSource) -> Result<CudaWeight, BackendError> {
        if !self.supports(src.ty) {
            return Err(BackendError::UnsupportedType { backend: self.name(), ty: src.ty, name: src.name });
        }
        let bad = |why: String| BackendError::BadWeight { name: src.name.clone(), why };
        let row_bytes =
            src.ty
                .bytes_for(src.cols as u64)
                .ok_or_else(|| bad(format!("{} columns do not fill whole blocks", src.cols)))? as usize;
        if row_bytes * src.rows != src.bytes.len() {
            return Err(bad(format!("{} bytes for {} × {} {}", src.bytes.len(), src.rows, src.cols, src.ty)));
        }
        let dense = if src.rows == 1 {
            let mut v = vec![0f32; src.cols];
            plumb_core::quant::dequantize(src.ty, &src.bytes, &mut v).map_err(|e| bad(e.to_string()))?;
            Some(self.stream.clone_htod(&v).expect("CUDA upload failed"))
        } else {
            None
        };
        let host: &[u8] = &src.bytes;
        let bytes =
            self.stream.clone_htod(if host.is_empty() { &[0u8][..] } else { host }).expect("CUDA upload failed");
        Ok(CudaWeight { name: src.name, ty: src.ty, rows: src.rows, cols: src.cols, row_bytes, bytes, dense })
    }

    fn tensor(&self, rows: usize, cols: usize) -> CudaTensor {
        CudaTensor { rows, cols, buf: self.alloc(rows * cols) }
    }

    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> CudaTensor {
        assert_eq!(data.len(), rows * cols);
        let data = if data.is_empty() { &[0f32][..] } else { data };
        CudaTensor { rows, cols, buf: self.stream.clone_htod(data).expect("CUDA upload failed") }
    }

    fn download(&self, t: &CudaTensor) -> Vec<f32> {
        let mut v = self.stream.clone_dtoh(&t.buf).expect("CUDA download failed");
        v.truncate(t.rows * t.cols);
        v
    }

    fn new_kv_cache(&self, spec: &KvSpec) -> CudaKvCache {
        CudaKvCache::new(self, spec)
    }
}
