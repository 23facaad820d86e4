//! What a dependent stage of a decode step costs on this GPU: a kernel boundary (as every op of
//! plumb's step is today) against a grid-wide barrier inside one persistent kernel (what a decode
//! kernel running a layer's stages in one launch would pay instead). The default model's step is
//! ~215 dependent launches of a few microseconds of work each (docs/cuda-h100-notes.md, session
//! 21): whether such a kernel pays is this table.
//!
//! Every stage is the same small work: each block waits for the stage before, reads its 576-float
//! row (a decode product's x), sums it and writes one element of the next row, so each stage
//! depends on the last. Timed over `STAGES` stages, per stage, at 1, 32 and one block an SM:
//! - `launch, eager`: one launch a stage, queued back to back on a stream;
//! - `launch, graph + PDL`: the same launches captured into a CUDA graph with programmatic
//!   dependent launch, each kernel waiting (`griddepcontrol.wait`) and releasing the next at its
//!   first statement, as plumb's kernels do (`PDL_ENTRY`);
//! - `persistent, grid barrier`: one launch running every stage, the blocks meeting at a barrier
//!   between stages (a release add and an acquire spin on one counter, by thread 0 of each block);
//! - `persistent, no barrier`: the same without the barrier (racy, timing only): the work alone.
//!
//! The persistent kernel needs every block resident at once: one block an SM at most, nothing else
//! on the GPU. On the CPU emulator (tools/cuda-emu), whose blocks run one after another, only the
//! one-block rows can run the barrier; the example checks the chain's result there and on a GPU.
//!
//!   cargo run --release -p plumb-backend-cuda --example stage_boundary [-- STAGES]

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, DevicePtr};
use plumb_backend_cuda::CudaBackend;
use std::ffi::c_void;
use std::time::Instant;

const ROW: usize = 576;
const THREADS: u32 = 256;

const SOURCE: &str = r#"
typedef unsigned int u32;
#define ROW 576
// One stage's work: the block's sum of row `in` (fixed order: a thread's strided elements, then the
// warps' sums by thread 0), and element blockIdx.x of row `out` from it.
__device__ __forceinline__ void stage_work(const float* in, float* out) {
    __shared__ float warp_sums[8];
    float s = 0.0f;
    for (int i = threadIdx.x; i < ROW; i += blockDim.x) s += in[i];
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < (int)blockDim.x / 32; w++) t += warp_sums[w];
        if (blockIdx.x < ROW) out[blockIdx.x] = t * (1.0f / ROW) + 1.0f;
    }
    __syncthreads();
}
// One launch a stage: rows alternate between the two halves of `rows`.
extern "C" __global__ void stage_launch(float* rows, int stage) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    stage_work(rows + (stage % 2) * ROW, rows + ((stage + 1) % 2) * ROW);
}
// Every stage in one launch, the blocks meeting at a barrier between stages (`barrier` != 0):
// thread 0 of each block adds one to `count` (release: the block's stores, which the barrier
// before it ordered, go with it) and waits (acquire) for all of this stage's arrivals.
extern "C" __global__ void stage_persistent(float* rows, u32* count, int stages, int barrier) {
    for (int s = 0; s < stages; s++) {
        stage_work(rows + (s % 2) * ROW, rows + ((s + 1) % 2) * ROW);
        if (barrier) {
            if (threadIdx.x == 0) {
                const u32 target = (u32)(s + 1) * gridDim.x;
                asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(count) : "memory");
                u32 seen = 0;
                do {
                    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(count) : "memory");
                } while (seen < target);
            }
            __syncthreads();
        }
    }
}
"#;

/// What the chain leaves in row `stages % 2`'s first `blocks` elements, computed on the host in
/// the kernel's order (one row of ones to start).
fn expected(stages: usize, blocks: usize, threads: usize) -> Vec<f32> {
    let mut row = vec![1.0f32; ROW];
    for _ in 0..stages {
        let mut lanes = vec![0.0f32; threads];
        for (t, lane) in lanes.iter_mut().enumerate() {
            *lane = (t..ROW).step_by(threads).map(|i| row[i]).fold(0.0, |a, v| a + v);
        }
        // The xor butterfly of each warp (every lane ends with the same sum; lane 0's is kept).
        let mut warp_sums = Vec::new();
        for w in lanes.chunks(32) {
            let mut v = w.to_vec();
            let mut o = 16;
            while o > 0 {
                v = (0..32).map(|l| v[l] + v[l ^ o]).collect();
                o /= 2;
            }
            warp_sums.push(v[0]);
        }
        let t = warp_sums.iter().fold(0.0f32, |a, &v| a + v);
        let y = t * (1.0 / ROW as f32) + 1.0;
        for v in row.iter_mut().take(blocks.min(ROW)) {
            *v = y;
        }
    }
    row[..blocks.min(ROW)].to_vec()
}

/// Launches `f` on `grid` blocks with its arguments, programmatically serialized when `pdl`.
///
/// # Safety
/// `args` must point at live values matching the kernel's parameters.
unsafe fn launch(f: &CudaFunction, grid: u32, stream: &CudaStream, args: &mut [*mut c_void], pdl: bool) {
    let mut attr = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value: sys::CUlaunchAttributeValue { programmaticStreamSerializationAllowed: 1 },
    };
    let config = sys::CUlaunchConfig {
        gridDimX: grid,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: THREADS,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        hStream: stream.cu_stream(),
        attrs: &mut attr,
        numAttrs: pdl as u32,
    };
    // SAFETY: `config` and `attr` are live locals; the caller vouches for `args`.
    unsafe { sys::cuLaunchKernelEx(&config, f.cu_function(), args.as_mut_ptr(), std::ptr::null_mut()) }
        .result()
        .expect("launch");
}

fn main() {
    let stages: usize = std::env::args().nth(1).map_or(2000, |s| s.parse().expect("STAGES: a count"));
    let ctx = CudaContext::new(0).expect("a CUDA device");
    // A stream of its own: the legacy default stream cannot be captured into a graph.
    let stream = ctx.new_stream().expect("stream");
    let (major, minor) = ctx.compute_capability().expect("compute capability");
    let cubin = CudaBackend::compile_probe(SOURCE, major, minor).expect("compile");
    let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin)).expect("module");
    let (per_stage, persistent) = (
        module.load_function("stage_launch").expect("stage_launch"),
        module.load_function("stage_persistent").expect("stage_persistent"),
    );
    let sms = ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).expect("SMs") as u32;
    let emulated = ctx.name().is_ok_and(|n| n.contains("emulation"));
    println!("{} ({sms} SMs), {stages} stages, {THREADS} threads a block", ctx.name().unwrap_or_default());
    println!("{:<28} {:>7} {:>12}", "stage boundary", "blocks", "us a stage");

    let mut rows = stream.alloc_zeros::<f32>(2 * ROW).expect("rows");
    let mut count = stream.alloc_zeros::<u32>(1).expect("count");
    let reset = |rows: &mut cudarc::driver::CudaSlice<f32>, count: &mut cudarc::driver::CudaSlice<u32>| {
        stream.memcpy_htod(&vec![1.0f32; 2 * ROW], rows).expect("rows");
        stream.memset_zeros(count).expect("count");
    };
    let check = |rows: &cudarc::driver::CudaSlice<f32>, blocks: u32, what: &str| {
        let got = stream.clone_dtoh(rows).expect("download");
        let at = (stages % 2) * ROW;
        let want = expected(stages, blocks as usize, THREADS as usize);
        assert_eq!(&got[at..at + want.len()], &want[..], "{what}, {blocks} blocks: the chain's result");
    };
    let report = |what: &str, blocks: u32, t: Instant, reps: usize| {
        stream.synchronize().expect("sync");
        let us = t.elapsed().as_secs_f64() * 1e6 / (stages * reps) as f64;
        println!("{what:<28} {blocks:>7} {us:>12.2}");
    };
    let (r, c) = (rows.device_ptr(&stream).0, count.device_ptr(&stream).0);
    for blocks in [1, 32, sms] {
        // One launch a stage, eager.
        reset(&mut rows, &mut count);
        stream.synchronize().expect("sync");
        let t = Instant::now();
        for s in 0..stages {
            let (mut rp, mut si) = (r, s as i32);
            let mut args = [(&mut rp as *mut u64).cast(), (&mut si as *mut i32).cast()];
            // SAFETY: the arguments match `stage_launch(float*, int)` and live through the call.
            unsafe { launch(&per_stage, blocks, &stream, &mut args, false) };
        }
        report("launch, eager", blocks, t, 1);
        check(&rows, blocks, "launch, eager");

        // The same launches in a CUDA graph with programmatic dependent launch.
        reset(&mut rows, &mut count);
        stream.synchronize().expect("sync");
        stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).expect("capture");
        for s in 0..stages {
            let (mut rp, mut si) = (r, s as i32);
            let mut args = [(&mut rp as *mut u64).cast(), (&mut si as *mut i32).cast()];
            // SAFETY: as above; a captured launch copies its arguments.
            unsafe { launch(&per_stage, blocks, &stream, &mut args, true) };
        }
        let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0)).expect("graph").expect("a graph");
        graph.upload().expect("upload");
        graph.launch().expect("replay");
        stream.synchronize().expect("sync");
        check(&rows, blocks, "launch, graph + PDL");
        let reps = 3;
        let t = Instant::now();
        for _ in 0..reps {
            graph.launch().expect("replay");
        }
        report("launch, graph + PDL", blocks, t, reps);

        // One persistent launch: with the barrier (where every block can be resident), then without.
        for barrier in [1, 0] {
            if barrier == 1 && emulated && blocks > 1 {
                println!("{:<28} {blocks:>7} {:>12}", "persistent, grid barrier", "(emulator)");
                continue;
            }
            reset(&mut rows, &mut count);
            stream.synchronize().expect("sync");
            let t = Instant::now();
            let (mut rp, mut cp, mut n, mut b) = (r, c, stages as i32, barrier);
            let mut args = [
                (&mut rp as *mut u64).cast(),
                (&mut cp as *mut u64).cast(),
                (&mut n as *mut i32).cast(),
                (&mut b as *mut i32).cast(),
            ];
            // SAFETY: the arguments match `stage_persistent(float*, u32*, int, int)`.
            unsafe { launch(&persistent, blocks, &stream, &mut args, false) };
            let what = if barrier == 1 { "persistent, grid barrier" } else { "persistent, no barrier" };
            report(what, blocks, t, 1);
            if barrier == 1 || blocks == 1 {
                check(&rows, blocks, what);
            }
        }
    }
}
