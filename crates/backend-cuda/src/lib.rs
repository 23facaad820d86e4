//! plumb-backend-cuda: the CUDA backend. Kernels are CUDA C++ (`src/kernels/*.cu`) compiled by
//! NVRTC at run time for the device's architecture and cached on disk (`compile`); the driver and
//! NVRTC are loaded at run time, so the crate builds, and its tests skip, on machines without CUDA.
//! Activations (from a caching pool, `pool`), weights (in their checkpoint format) and the paged
//! KV cache (f32) live on the device; all work runs in order on one stream. A forward pass is a
//! step (`step`): its metadata is uploaded once, and decode steps are recorded and replayed as
//! CUDA graphs (`graph`; `PLUMB_CUDA_GRAPHS=0` turns them off).
//! Invariant (GPU.md): every op has one canonical arithmetic per output element, fixed by the op,
//! the dtypes and the model's shapes — never by the number of rows, a row's place in the batch,
//! chunking or the launch shape — so row r of any batch is bit-identical to that row alone, and a
//! replayed graph is bit-identical to the same launches run one by one.
//! Device failures inside an op (out of memory, a faulted kernel) panic with the driver's error:
//! the backend traits are infallible today (see `CudaError`).

mod attention_plan;
mod compile;
mod graph;
mod kernel_set;
mod kv;
mod launch;
mod linear_plan;
mod measure;
mod ops;
mod ops_fused;
mod ops_linear;
mod ops_tma;
mod pick;
mod pool;
mod profile;
mod report;
mod step;
mod step_state;
pub mod timeline;
mod tma;
mod tma_ksplit;
mod transfer;
mod weight;

pub use graph::GraphStats;
pub use kv::CudaKvCache;
pub use measure::WorkCounters;
pub use weight::CudaWeight;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DriverError, LaunchConfig,
};
use kernel_set::{
    KV_STORES, default_kv_store, kernel_names, resident_blocks, store_code, type_suffix, wide_resident_blocks,
};
use plumb_core::{
    Backend, BackendError, ForwardBatch, GgmlType, KvSpec, KvStore, LinearInputs, LogprobRow, PickRow, Picked, Shape,
    TokenLogprobs, WeightSource,
};
use pool::{DeviceBuf, Pool};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

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
    #[error("{name}={value} is not a setting plumb knows: expected {expected}")]
    BadSetting { name: &'static str, value: String, expected: &'static str },
    #[error("NVRTC failed while {during} ({code}){}", if log.is_empty() { String::new() } else { format!(":\n{log}") })]
    Nvrtc { during: &'static str, code: String, log: String },
    #[error("cuBLASLt (libcublasLt.so) could not be loaded: the bf16 rate of the roofline is measured with it")]
    NoCublasLt,
    #[error("cuBLASLt failed while {during}: {message}")]
    CublasLt { during: &'static str, message: String },
}

/// The whole number the environment variable `name` holds, else `default`; a value that is not
/// one is a `BadSetting` saying what was `expected`.
fn number_setting(name: &'static str, default: usize, expected: &'static str) -> Result<usize, CudaError> {
    match std::env::var(name) {
        Ok(v) => v.parse().map_err(|_| CudaError::BadSetting { name, value: v, expected }),
        Err(_) => Ok(default),
    }
}

fn driver(during: &'static str) -> impl FnOnce(DriverError) -> CudaError {
    move |source| CudaError::Driver { during, source }
}

/// An activation tensor on the device: [rows, cols] f32, row-major, in a pool buffer that holds
/// `padded_rows >= rows` rows: a tensor of a padded step (`step`) carries the step's pad rows
/// after its real ones, and every kernel runs over all of them.
#[derive(Debug)]
pub struct CudaTensor {
    pub rows: usize,
    pub cols: usize,
    pub(crate) padded_rows: usize,
    pub(crate) buf: DeviceBuf,
}

impl CudaTensor {
    pub(crate) fn ptr(&self) -> u64 {
        self.buf.ptr
    }
}

impl Shape for CudaTensor {
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
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    _module: Arc<CudaModule>,
    kernels: HashMap<String, CudaFunction>,
    device_name: String,
    arch: String,
    driver_version: i32,
    nvrtc_version: (i32, i32),
    /// Whether the kernels came from the disk cache (false: NVRTC compiled them now).
    pub kernels_cached: bool,
    pub(crate) pool: Arc<Mutex<Pool>>,
    pub(crate) state: Mutex<step_state::State>,
    graphs_enabled: AtomicBool,
    /// Whether `pick` runs on the device (`pick.rs`).
    pub(crate) picks_enabled: AtomicBool,
    /// Arrival counters, zero between launches (the last block to arrive resets its counter): the
    /// decode `linear`'s feature tiles (one per 64 features, so weights up to `ARRIVAL_COUNTERS` ×
    /// 64 features) and a split decode attention's (row, KV head) blocks. Kernels of one stream
    /// take them in turn: each waits for its predecessor (`griddepcontrol.wait`) before counting.
    arrival_counters: CudaSlice<u32>,
    /// The element type new KV caches store K and V in (`KvStore` as a u8: 0 f32, 1 f16, 2 bf16).
    kv_store: std::sync::atomic::AtomicU8,
    /// Resident blocks of the decode kernel on the whole device, per number of 8-row groups
    /// (None: the fixed split of `PLUMB_CUDA_DECODE_SPLIT=fixed`), and its modelled pipeline
    /// fill (`ops_linear::decode_split`; `PLUMB_CUDA_DECODE_FILL` overrides it, for measuring).
    pub(crate) decode_slots: [Option<usize>; 8],
    /// The same for the wide decode kernel (two warps per 16 features), and the number of 8-row
    /// groups from which it is used (`PLUMB_CUDA_DECODE_WIDE` overrides it, for measuring).
    pub(crate) decode_slots_wide: [Option<usize>; 8],
    pub(crate) decode_wide_groups: usize,
    pub(crate) decode_fill: f64,
    /// Whether attention over a 16-bit KV store runs on the tensor cores (`attention_mma.cu`, for
    /// the head sizes of `attention_plan::MMA_HEAD_DIMS`); `PLUMB_CUDA_ATT_MMA=0` keeps the f32 CUDA-core kernel,
    /// for measuring against (a different canonical form: bits differ between the two settings).
    pub(crate) attention_mma: bool,
    /// Whether decode rows split their context over blocks, one per split of the attention
    /// kernel's form (`PLUMB_CUDA_ATT_SPLIT=0`: one block walks it all; the same bits, for measuring).
    pub(crate) attention_split_kv: bool,
    /// Whether decode rows on many blocks run one warp a block on the tensor cores
    /// (`attention_plan::attention_blocks`; `PLUMB_CUDA_ATT_WARP_BLOCKS=0`: 4-warp blocks; the same
    /// bits, for measuring).
    pub(crate) attention_warp_blocks: bool,
    /// Whether the f32 attention kernel's split decode rows are folded by their last block to
    /// finish (default) or by an `attention_merge` launch after it
    /// (`PLUMB_CUDA_ATT_MERGE_LAUNCH=1`, for measuring). The same bits.
    pub(crate) attention_merge_launch: bool,
    /// Whether a quantized model's gate|up and SwiGLU run as one launch (`linear_swiglu`;
    /// `PLUMB_CUDA_FUSE_SWIGLU=0` runs them apart, for measuring: the same bits).
    pub(crate) fuse_swiglu: bool,
    /// Whether an RMSNorm runs inside the split CUDA-core products that read it
    /// (`norm_linear_multi`, `norm_linear_swiglu`): off unless `PLUMB_CUDA_FUSE_NORM=1` or
    /// [`CudaBackend::set_fuse_norm`] (the same bits either way). On the H200 each block's norm
    /// before its products cost more than the launch it saves: the default model decoded at
    /// 821 tokens/s with it and 863-865 without (session 16, docs/cuda-fusion-notes.md).
    pub(crate) fuse_norm: AtomicBool,
    /// Whether a residual add runs in the store of the product it adds (`linear_add`;
    /// `PLUMB_CUDA_FUSE_RESIDUAL=0` launches `add` after it, for measuring: the same bits).
    pub(crate) fuse_residual: bool,
    /// Whether RoPE and the K/V store run in the q|k|v split launch (`norm_qkv_rope_write_kv`;
    /// `PLUMB_CUDA_FUSE_QKV_ROPE=0` launches `rope_write_kv` after it: the same bits).
    pub(crate) fuse_qkv_rope: bool,
    /// Whether weights of many features read by few rows run on `linear_wide` (a warp's whole
    /// rows copied at once; `PLUMB_CUDA_WIDE_ROWS=0`: `linear_split`, the same bits).
    pub(crate) wide_rows: bool,
    /// `linear_wide`'s grid: 0, a block a group of features (the default: on the H200 the default
    /// model's LM head took 46.7 µs so against 49.1 persistent, session 17); else a persistent grid
    /// of that many blocks, each walking groups (`PLUMB_CUDA_WIDE_PERSIST=1`: the blocks the device
    /// keeps resident; `set_wide_grid`). The same bits either way.
    pub(crate) wide_grid: std::sync::atomic::AtomicUsize,
    /// Whether a Q8_0 weight that would run on `linear_wide` runs on `linear_replay_q8_0` instead
    /// (a thread a feature replaying a warp's lanes: kernels/linear_replay.cu): on unless
    /// `PLUMB_CUDA_WIDE_REPLAY=0` (or `set_wide_replay`). Alone, the default model's head took
    /// 14.45 µs a launch against `linear_wide`'s 43.26 at one row and 54.6 against 143.0 at four
    /// (H100, session 20, examples/wide_head.rs). The same bits either way.
    pub(crate) wide_replay: AtomicBool,
    /// Whether CUDA-core weights at more rows than `linear_split` takes run on `linear_tile`
    /// (register-tiled blocks of 64 features: kernels/linear_tile.cu) instead of `linear_`'s warp
    /// a feature, and on which rows a tile: 0, off; 1, 64 (the default: pp512 of an f32
    /// SmolLM2-135M shape 37,332 / 37,423 tokens/s against 19,369 / 19,376, H100, session 20); 2,
    /// 32 where 64-row tiles would leave SMs idle (`PLUMB_CUDA_LINEAR_TILE`, `set_linear_tile`).
    /// The same bits every way.
    pub(crate) linear_tile: std::sync::atomic::AtomicU8,
    /// Whether a one-weight `linear_tile` launch whose tiles would leave SMs idle runs a block a
    /// (tile, chunk), the last of a tile folding its chunks (`ops_linear::tile_chunk_split`;
    /// `PLUMB_CUDA_TILE_SPLIT=0` or `set_tile_split(false)`: whole-K tiles). The same bits.
    pub(crate) tile_split: AtomicBool,
    /// Whether gate|up and the SwiGLU run as one TMA launch where its tasks keep whole K
    /// (`ops_tma::linear_tma_glu`; `PLUMB_CUDA_TMA_GLU=0` or `set_tma_glu(false)`: the two
    /// products, then `silu_mul`). The same bits.
    pub(crate) tma_glu: AtomicBool,
    /// Whether gate|up and the SwiGLU of prefill rows (tiles of 128 and 192 rows, whole K) run as
    /// one TMA launch with gate's and up's rows interleaved (the `_gli` instances); needs
    /// `tma_glu`. `PLUMB_CUDA_TMA_GLI=0` or `set_tma_gli(false)`: the two products, then
    /// `silu_mul`. The same bits.
    pub(crate) tma_gli: AtomicBool,
    /// Interleaved GLU launches so far (`tma_gli_launches`, for tests).
    pub(crate) tma_gli_launches: std::sync::atomic::AtomicU64,
    /// TMA `linear` launches in clusters of two so far (`tma_cluster_launches`, for tests).
    pub(crate) tma_cluster_launches: std::sync::atomic::AtomicU64,
    /// TMA `linear` launches whose K split over a cluster so far (`tma_ks_launches`, for tests).
    pub(crate) tma_ks_launches: std::sync::atomic::AtomicU64,
    /// Whether an RMSNorm runs inside the TMA products of decode rows that read it (the `_norm`
    /// instances, `ops_fused::tma_norm_fuses`): off unless `PLUMB_CUDA_TMA_NORM=1` or
    /// [`CudaBackend::set_tma_norm`] (the same bits either way). On the H100 one request's 8B
    /// step took 6,898 µs with it and 6,814 without: the fused launches gain the norm's latency,
    /// and their early weight reads take it back from the product before them (session 26,
    /// receipts/ab/session26).
    pub(crate) tma_norm: AtomicBool,
    /// Whether prefill chunks' attention (blocks walking several rows of a lane) runs on the
    /// warpgroup MMA (`attention_wgmma.cu`, Hopper) instead of mma.sync (`attention_mma.cu`):
    /// on unless `PLUMB_CUDA_ATT_WGMMA=0`, or [`CudaBackend::set_attention_wgmma`]. The same
    /// canonical form, so the same bits either way.
    pub(crate) attention_wgmma: AtomicBool,
    /// Attention launches on the warpgroup MMA so far (`attention_wgmma_launches`, for tests).
    pub(crate) attention_wgmma_launches: std::sync::atomic::AtomicU64,
    /// Launches with the norm inside so far (`tma_norm_launches`, for tests).
    pub(crate) tma_norm_launches: std::sync::atomic::AtomicU64,
    /// GLU launches so far (`tma_glu_launches`, for tests).
    pub(crate) tma_glu_launches: std::sync::atomic::AtomicU64,
    /// Positions per split of the tensor-core attention's canonical form (`attention_plan::ATM_SPLIT`, or
    /// `PLUMB_CUDA_ATM_SPLIT`): bits follow it, so it is fixed for the backend's life.
    pub(crate) atm_split: usize,
    /// The K from which tensor-core weights fold chunks of 1,024 instead of 256
    /// (`ops_linear::fold_chunk`, or `PLUMB_CUDA_KC_LONG_FROM`): bits follow it, so it is fixed
    /// for the backend's life.
    pub(crate) fold_long_from: usize,
    /// Whether a weight on the tensor cores has been loaded (`rms_norm` then writes the rounded
    /// copy of its output those weights take; `PLUMB_CUDA_NORM_ROUND=0` turns that off).
    pub(crate) mma_weights: AtomicBool,
    norm_round: bool,
    /// Whether a residual add and the norm after it run as one kernel (`add_rms_norm`;
    /// `PLUMB_CUDA_FUSE_ADD=0` launches the two apart: the same bits, for measuring).
    pub(crate) fuse_add: bool,
    /// Whether `linear_multi` runs weights of one input together, up to three a launch
    /// (`PLUMB_CUDA_GROUP_LINEAR=0` launches each apart: the same bits, for measuring).
    pub(crate) group_linear: bool,
    /// Whether RoPE of q and k and the K/V write run as one kernel (`rope_write_kv`;
    /// `PLUMB_CUDA_FUSE_ROPE_KV=0` launches `rope_qk` and `write_kv` apart: the same bits).
    pub(crate) fuse_rope_kv: bool,
    /// Whether the split `linear` of block formats copies each chunk's bytes into shared memory
    /// with coalesced 4-byte loads before dequantizing (`PLUMB_CUDA_STAGED_LOADS=0`: byte loads
    /// from global memory; the same bits, for measuring).
    pub(crate) staged_loads: bool,
    /// How tensor-core `linear` runs (`tma::TmaPlan`).
    pub(crate) tma: tma::TmaPlan,
    /// The bytes the ops have read and the FLOPs they have done (`measure::WorkCounters`).
    pub(crate) work: Arc<WorkCounters>,
}

/// Feature tiles of 64 the decode kernel can count arrivals for: weights up to 4M features.
const ARRIVAL_COUNTERS: usize = 1 << 16;

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
        compile::nvrtc_present()?;
        let ctx = CudaContext::new(ordinal).map_err(driver("creating the context"))?;
        // SAFETY: the backend uses one stream only, so no buffer is ever shared between streams and
        // the cross-stream events cudarc would record are not needed.
        unsafe { ctx.disable_event_tracking() };
        // A stream of its own (not the legacy default stream, which cannot be captured).
        let stream = ctx.new_stream().map_err(driver("creating the stream"))?;
        let (major, minor) = ctx.compute_capability().map_err(driver("reading the compute capability"))?;
        let arch = compile::arch_name(major, minor);
        launch::set_pdl(major >= 9 && std::env::var("PLUMB_CUDA_PDL").ok().is_none_or(|v| v != "0"));
        let (image, kernels_cached) = compile::cubin(&arch)?;
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(image)).map_err(driver("loading the kernels"))?;
        let timeline = timeline::Timeline::attach(&module, &stream)?;
        let mut kernels = HashMap::new();
        for name in kernel_names() {
            let f = module.load_function(&name).map_err(driver("finding a kernel"))?;
            let smem = match name.as_str() {
                "linear_mma_decode_bf16" | "linear_mma_decode_wide_bf16" => ops_linear::MMA_DECODE_SMEM,
                "linear_wgmma_bf16" => ops_linear::WGMMA_SMEM,
                _ if name.starts_with("linear_tma_bf16_n") => tma::tma_smem_max_of(&name).expect("named by rows"),
                _ if name.starts_with("linear_tile32_") => ops_linear::tile_smem(32),
                _ if name.starts_with("linear_tile_") => ops_linear::tile_smem(64),
                _ if name.starts_with("attention_mma_") || name.starts_with("attention_wgmma_") => {
                    let (kind, rest) = name["attention_".len()..].split_once('_').expect("named by kernel");
                    let (hd, store) = rest.split_once('_').expect("named by head size and store");
                    let store = KvStore::parse(store).expect("attention kernels are named by their store");
                    let hd = hd.parse().expect("attention kernels are named by head size");
                    if kind == "wgmma" {
                        attention_plan::attention_wgmma_smem(hd, store)
                    } else {
                        attention_plan::attention_mma_smem(hd, store, 4)
                    }
                }
                _ => match name.strip_prefix("attention_").and_then(|rest| rest.split_once('_')) {
                    Some((hd, store)) => {
                        let store = KvStore::parse(store).expect("attention kernels are named by their store");
                        attention_plan::attention_smem(
                            hd.parse().expect("attention kernels are named by head size"),
                            store,
                        )
                    }
                    None => 0,
                },
            };
            if smem > 0 {
                use cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as MAX_SMEM;
                f.set_attribute(MAX_SMEM, smem as i32).map_err(driver("allowing a kernel its shared memory"))?;
            }
            kernels.insert(name, f);
        }
        if let Ok(v) = std::env::var("PLUMB_CUDA_PDL_OFF") {
            let funcs = v
                .split(',')
                .filter(|n| !n.is_empty())
                .map(|n| {
                    kernels.get(n).map(|f| f.cu_function() as usize).ok_or_else(|| CudaError::BadSetting {
                        name: "PLUMB_CUDA_PDL_OFF",
                        value: v.clone(),
                        expected: "kernel names, comma-separated",
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            launch::set_pdl_off(funcs);
        }
        let decode_slots = resident_blocks(&ctx, &kernels, "linear_mma_decode_bf16", 128)?;
        let decode_slots_wide = resident_blocks(&ctx, &kernels, "linear_mma_decode_wide_bf16", 256)?;
        let tma = tma::TmaPlan::new(&ctx, &kernels)?;
        let decode_wide_groups = number_setting(
            "PLUMB_CUDA_DECODE_WIDE",
            ops_linear::DECODE_WIDE_GROUPS,
            "a number of 8-row groups (9: never)",
        )?;
        let decode_fill = std::env::var("PLUMB_CUDA_DECODE_FILL").ok().and_then(|v| v.parse().ok());
        let fold_long_from = number_setting(
            "PLUMB_CUDA_KC_LONG_FROM",
            ops_linear::FOLD_LONG_FROM,
            "a K in elements (a large one: chunks of 256 everywhere)",
        )?;
        let device_name = ctx.name().map_err(driver("reading the device name"))?;
        let mut driver_version = 0;
        // SAFETY: the driver is loaded and initialized (a context exists); the out-pointer is a valid local.
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) }
            .result()
            .map_err(driver("reading the driver version"))?;
        let nvrtc_version = compile::nvrtc_version()?;
        // Profiling times every launch, so it runs them eagerly.
        let profiler = profile::Profiler::from_env();
        let graphs_enabled = std::env::var("PLUMB_CUDA_GRAPHS").ok().is_none_or(|v| v != "0") && profiler.is_none();
        Ok(CudaBackend {
            pool: Arc::new(Mutex::new(Pool::new(ctx.clone()))),
            state: Mutex::new({
                let step_times = profile::StepTimer::from_env();
                let mut graphs = graph::Graphs::default();
                graphs.track_misses = step_times.is_some();
                graphs.segment_ops =
                    number_setting("PLUMB_CUDA_GRAPH_SEGMENT", step::SEGMENT_OPS, "launches per graph (0: a step)")?;
                graphs.ramp = std::env::var("PLUMB_CUDA_GRAPH_RAMP").ok().is_none_or(|v| v != "0");
                step_state::State { profile: profiler, step_times, graphs, timeline, ..Default::default() }
            }),
            graphs_enabled: AtomicBool::new(graphs_enabled),
            picks_enabled: AtomicBool::new(std::env::var_os("PLUMB_CUDA_PICK").is_none_or(|v| v != "0")),
            work: Arc::default(),
            decode_slots,
            decode_slots_wide,
            decode_wide_groups,
            decode_fill: decode_fill.unwrap_or(ops_linear::DECODE_FILL),
            tma,
            arrival_counters: stream
                .alloc_zeros::<u32>(ARRIVAL_COUNTERS)
                .map_err(driver("allocating the arrival counters"))?,
            kv_store: std::sync::atomic::AtomicU8::new(store_code(default_kv_store()?)),
            attention_mma: std::env::var("PLUMB_CUDA_ATT_MMA").ok().is_none_or(|v| v != "0"),
            attention_split_kv: std::env::var("PLUMB_CUDA_ATT_SPLIT").ok().is_none_or(|v| v != "0"),
            attention_warp_blocks: std::env::var("PLUMB_CUDA_ATT_WARP_BLOCKS").ok().is_none_or(|v| v != "0"),
            attention_merge_launch: std::env::var("PLUMB_CUDA_ATT_MERGE_LAUNCH").is_ok_and(|v| v == "1"),
            fuse_swiglu: std::env::var("PLUMB_CUDA_FUSE_SWIGLU").ok().is_none_or(|v| v != "0"),
            fuse_norm: AtomicBool::new(std::env::var("PLUMB_CUDA_FUSE_NORM").is_ok_and(|v| v == "1")),
            fuse_residual: std::env::var("PLUMB_CUDA_FUSE_RESIDUAL").ok().is_none_or(|v| v != "0"),
            fuse_qkv_rope: std::env::var("PLUMB_CUDA_FUSE_QKV_ROPE").ok().is_none_or(|v| v != "0"),
            wide_rows: std::env::var("PLUMB_CUDA_WIDE_ROWS").ok().is_none_or(|v| v != "0"),
            wide_grid: match std::env::var("PLUMB_CUDA_WIDE_PERSIST").as_deref() {
                Ok("1") => wide_resident_blocks(&ctx, &kernels)?,
                _ => 0,
            }
            .into(),
            wide_replay: AtomicBool::new(std::env::var("PLUMB_CUDA_WIDE_REPLAY").ok().is_none_or(|v| v != "0")),
            tile_split: AtomicBool::new(std::env::var("PLUMB_CUDA_TILE_SPLIT").ok().is_none_or(|v| v != "0")),
            tma_glu: AtomicBool::new(std::env::var("PLUMB_CUDA_TMA_GLU").ok().is_none_or(|v| v != "0")),
            tma_glu_launches: 0.into(),
            tma_gli: AtomicBool::new(std::env::var("PLUMB_CUDA_TMA_GLI").ok().is_none_or(|v| v != "0")),
            tma_gli_launches: 0.into(),
            tma_cluster_launches: 0.into(),
            tma_ks_launches: 0.into(),
            attention_wgmma: AtomicBool::new(std::env::var("PLUMB_CUDA_ATT_WGMMA").ok().is_none_or(|v| v != "0")),
            attention_wgmma_launches: 0.into(),
            tma_norm_launches: 0.into(),
            tma_norm: AtomicBool::new(std::env::var("PLUMB_CUDA_TMA_NORM").is_ok_and(|v| v == "1")),
            linear_tile: std::sync::atomic::AtomicU8::new(match std::env::var("PLUMB_CUDA_LINEAR_TILE").as_deref() {
                Ok("0") => 0,
                Ok("2") => 2,
                _ => 1,
            }),
            atm_split: attention_plan::atm_split_from(std::env::var("PLUMB_CUDA_ATM_SPLIT").ok().as_deref())?,
            fold_long_from,
            mma_weights: AtomicBool::new(false),
            norm_round: std::env::var("PLUMB_CUDA_NORM_ROUND").ok().is_none_or(|v| v != "0"),
            fuse_add: std::env::var("PLUMB_CUDA_FUSE_ADD").ok().is_none_or(|v| v != "0"),
            group_linear: std::env::var("PLUMB_CUDA_GROUP_LINEAR").ok().is_none_or(|v| v != "0"),
            fuse_rope_kv: std::env::var("PLUMB_CUDA_FUSE_ROPE_KV").ok().is_none_or(|v| v != "0"),
            staged_loads: std::env::var("PLUMB_CUDA_STAGED_LOADS").ok().is_none_or(|v| v != "0"),
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

    /// The device address of `n` (zeroed) arrival counters.
    pub(crate) fn arrival_counters(&self, n: usize) -> u64 {
        assert!(n <= ARRIVAL_COUNTERS, "{n} arrival counters asked for, {ARRIVAL_COUNTERS} kept");
        self.arrival_counters.device_ptr(&self.stream).0
    }

    pub(crate) fn kernel(&self, name: &str) -> &CudaFunction {
        self.kernels.get(name).unwrap_or_else(|| panic!("no CUDA kernel `{name}`"))
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // Graphs go before the module whose kernels they launch; let queued work finish first.
        let _ = self.stream.synchronize();
        if let Ok(mut st) = self.state.lock() {
            let misses = std::mem::take(&mut st.graphs.misses);
            st.graphs = graph::Graphs::default();
            if let Some(p) = st.profile.as_mut() {
                eprint!("{}", p.report(&self.kernels));
            }
            if let Some(t) = st.step_times.as_mut() {
                eprint!("{}", t.report());
                eprint!("{}", profile::misses_report(&misses, &self.kernels));
            }
            if let Some(t) = st.timeline.as_ref() {
                let names: Vec<&str> = self.kernels.keys().map(String::as_str).collect();
                eprint!("{}", t.finish(&self.stream, &names));
            }
        }
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

    /// bf16 weights with K a multiple of 32 run on the tensor cores of a Hopper-class device
    /// (wgmma for many rows, mma.sync for few), which take bf16 activations; every other weight,
    /// and every weight on an older device, keeps f32 activations on the CUDA cores.
    fn linear_inputs(&self, ty: GgmlType, k: usize) -> LinearInputs {
        let on = std::env::var_os("PLUMB_CUDA_MMA").is_none_or(|v| v != "0");
        if ty == GgmlType::BF16 && k.is_multiple_of(32) && self.has_wgmma() && on {
            LinearInputs::Bf16
        } else {
            LinearInputs::F32
        }
    }

    fn kv_store(&self) -> KvStore {
        KV_STORES[self.kv_store.load(Ordering::Relaxed) as usize]
    }

    fn load_weight(&self, src: WeightSource) -> Result<CudaWeight, BackendError> {
        self.load_weight_on(src)
    }

    fn tensor(&self, rows: usize, cols: usize) -> CudaTensor {
        self.new_tensor(rows, cols)
    }

    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> CudaTensor {
        assert_eq!(data.len(), rows * cols);
        // Recorded kernels may still read recycled pool memory: submit them before copying now.
        self.flush();
        let t = self.new_tensor(rows, cols);
        self.copy_in(t.ptr(), data);
        t
    }

    fn download(&self, t: &CudaTensor) -> Vec<f32> {
        self.download_from(t.ptr(), t.rows * t.cols)
    }

    fn profiles_memory(&self) -> bool {
        true
    }

    fn picks_on_device(&self) -> bool {
        self.picks_enabled.load(Ordering::Relaxed)
    }

    fn pick(&self, logits: &mut CudaTensor, rows: &[PickRow]) -> Vec<Picked> {
        self.pick_rows(logits, rows)
    }

    fn logprobs(&self, logits: &CudaTensor, rows: &[LogprobRow]) -> Vec<TokenLogprobs> {
        self.logprob_rows(logits, rows)
    }

    fn new_kv_cache(&self, spec: &KvSpec) -> CudaKvCache {
        CudaKvCache::new(self, spec).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_new_kv_cache(&self, spec: &KvSpec) -> Result<CudaKvCache, BackendError> {
        CudaKvCache::new(self, spec)
    }

    fn begin_step(&self, batch: &ForwardBatch, kv: &CudaKvCache) {
        self.begin_step_on(batch, kv);
    }
}
