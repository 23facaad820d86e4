//! The tensor-core probe GPU.md asks for, kept as a test: facts about Hopper's MMA instructions
//! that the canonical arithmetic of the bf16 `linear` relies on.
//! 1. A `wgmma.mma_async.m64nNk16` output element does not depend on N (8 … 256): padding the
//!    token tile changes no bit.
//! 2. A chain of `wgmma` k16 steps gives the same bits as the same chain of `mma.sync.m16n8k16`
//!    steps with the same elements at the same k positions — so a prefill kernel on wgmma and a
//!    decode kernel on mma.sync can share one canonical form.
//! 3. A chain started with `scale-d = 0` equals one started from zeroed accumulators.
//!
//! The probe kernels are built here with NVRTC (not part of the backend's module) and read their
//! operands in the plainest layout: K-major core matrices of 8 rows × 16 bytes, no swizzle.

#[path = "support/device.rs"]
mod device;

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};

const K: usize = 128;
const STEPS: usize = K / 16;
const M: usize = 64;
const NS: [usize; 5] = [8, 16, 64, 128, 256];

/// The probe's CUDA source: one wgmma kernel per N and the mma.sync chain.
fn source() -> String {
    let mut s = String::from(
        r#"
typedef unsigned int u32; typedef unsigned long long u64; typedef unsigned short u16;
__device__ __forceinline__ u64 desc(const void* p, u32 lbo, u32 sbo) {
    const u32 a = (u32)__cvta_generic_to_shared(p);
    return (u64)((a & 0x3FFFF) >> 4) | ((u64)((lbo & 0x3FFFF) >> 4) << 16) | ((u64)((sbo & 0x3FFFF) >> 4) << 32);
}
// Element (row, k) of a [rows][K] K-major operand at step k / 16: core matrix (row / 8, (k % 16) / 8),
// 128 contiguous bytes each, row-groups 256 bytes apart, the two K halves 128 bytes apart.
__device__ __forceinline__ int cm_offset(int row, int k, int rows) {
    const int s = k / 16, kk = k % 16;
    return s * rows * 32 + (row / 8) * 256 + (kk / 8) * 128 + (row % 8) * 16 + (kk % 8) * 2;
}
extern "C" __global__ void probe_mma(const u16* a, const u16* b, float* d, int n) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int ra = 16 * warp + g;
    for (int j = 0; j < n / 8; j++) {
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const int nb = 8 * j + g;
        for (int s = 0; s < KSTEPS; s++) {
            const int k0 = 16 * s + 2 * t;
            const u32 a0 = *(const u32*)(a + ra * KK + k0), a1 = *(const u32*)(a + (ra + 8) * KK + k0);
            const u32 a2 = *(const u32*)(a + ra * KK + k0 + 8), a3 = *(const u32*)(a + (ra + 8) * KK + k0 + 8);
            const u32 b0 = *(const u32*)(b + nb * KK + k0), b1 = *(const u32*)(b + nb * KK + k0 + 8);
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
        d[ra * n + 8 * j + 2 * t] = c[0];
        d[ra * n + 8 * j + 2 * t + 1] = c[1];
        d[(ra + 8) * n + 8 * j + 2 * t] = c[2];
        d[(ra + 8) * n + 8 * j + 2 * t + 1] = c[3];
    }
}
"#,
    );
    s = s.replace("KSTEPS", &STEPS.to_string()).replace("KK", &K.to_string());
    for n in NS {
        s.push_str(&wgmma_kernel(n, LBO, SBO));
    }
    s
}

/// The descriptor offsets of the core-matrix layout: the two K halves of a step (leading byte
/// offset) and the 8-row groups (stride byte offset). The other reading faults on the device
/// (seen on an H200: CUDA_ERROR_ILLEGAL_ADDRESS), so only this one is built.
const LBO: usize = 128;
const SBO: usize = 256;

/// `probe_wgmma_{n}(a, b, d, restart)`: 128 threads stage A [64][K] and B [n][K] in core-matrix
/// layout, then run the K/16 steps; `restart` = 1 starts from scale-d = 0 over accumulators
/// holding NaN instead of from zeroed ones.
fn wgmma_kernel(n: usize, lbo: usize, sbo: usize) -> String {
    let regs = n / 2;
    let list = (0..regs).map(|i| format!("%{i}")).collect::<Vec<_>>().join(",");
    let outs = (0..regs).map(|i| format!("\"+f\"(c[{i}])")).collect::<Vec<_>>().join(",");
    let (da, db, sc) = (regs, regs + 1, regs + 2);
    format!(
        r#"
extern "C" __global__ void __launch_bounds__(128) probe_wgmma_{n}(const u16* a, const u16* b, float* d, int restart) {{
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char* as = smem;
    unsigned char* bs = smem + {M} * {K} * 2;
    for (int i = threadIdx.x; i < {M} * {K}; i += 128) *(u16*)(as + cm_offset(i / {K}, i % {K}, {M})) = a[i];
    for (int i = threadIdx.x; i < {n} * {K}; i += 128) *(u16*)(bs + cm_offset(i / {K}, i % {K}, {n})) = b[i];
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    float c[{regs}];
    for (int r = 0; r < {regs}; r++) c[r] = restart ? __int_as_float(0x7fc00000) : 0.0f;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    for (int s = 0; s < {STEPS}; s++) {{
        const u64 dA = desc(as + s * {M} * 32, {lbo}, {sbo}), dB = desc(bs + s * {n} * 32, {lbo}, {sbo});
        const int scale = (restart && s == 0) ? 0 : 1;
        asm volatile("{{\n.reg .pred p;\nsetp.ne.b32 p, %{sc}, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{list}}}, %{da}, %{db}, p, 1, 1, 0, 0;\n}}\n"
                     : {outs}
                     : "l"(dA), "l"(dB), "r"(scale));
    }}
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    for (int r = 0; r < {regs}; r++) {{
        const int row = 16 * warp + g + 8 * ((r / 2) % 2), col = 8 * (r / 4) + 2 * t + (r % 2);
        d[row * {n} + col] = c[r];
    }}
}}
"#
    )
}

/// Random bf16 bits over a wide range of exponents (so sums round at many places) and both signs.
fn random_bf16(state: &mut u64, len: usize) -> Vec<u16> {
    (0..len)
        .map(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            let sign = ((*state >> 63) as u16) << 15;
            let exp = 127 - 12 + (*state >> 40) as u16 % 24;
            sign | exp << 7 | (*state >> 20) as u16 & 0x7f
        })
        .collect()
}

fn bf16_f64(b: u16) -> f64 {
    f32::from_bits((b as u32) << 16) as f64
}

#[test]
fn tensor_core_facts_the_canonical_forms_rely_on() {
    let Some(_backend) = device::backend("mma_probe") else { return };
    let ctx = CudaContext::new(0).expect("context");
    let stream = ctx.default_stream();
    let opts = cudarc::nvrtc::CompileOptions { arch: Some("sm_90a"), ..Default::default() };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(source(), opts).unwrap_or_else(|e| panic!("probe compile: {e:?}"));
    let module = ctx.load_module(ptx).expect("probe module");
    let mut rng = device::seed() | 1;
    let a = random_bf16(&mut rng, M * K);
    let b = random_bf16(&mut rng, 256 * K);
    let (a_dev, b_dev) = (stream.clone_htod(&a).unwrap(), stream.clone_htod(&b).unwrap());

    let run = |name: &str, n: usize, arg: i32, threads: u32, smem: usize| -> Vec<f32> {
        let f = module.load_function(name).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        if smem > 48 * 1024 {
            use cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as MAX;
            f.set_attribute(MAX, smem as i32).unwrap();
        }
        let mut d = stream.alloc_zeros::<f32>(M * n).unwrap();
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: smem as u32 };
        let mut l = stream.launch_builder(&f);
        l.arg(&a_dev).arg(&b_dev).arg(&mut d).arg(&arg);
        // SAFETY: the kernels read a [64][K] and b [n][K] bf16 (allocated above for n <= 256) and
        // write d [64][n] f32; the launch has the threads and shared memory they are written for.
        unsafe { l.launch(cfg) }.unwrap_or_else(|e| panic!("{name}: {e:?}"));
        stream.clone_dtoh(&d).unwrap_or_else(|e| panic!("{name}: {e:?}"))
    };

    // The truth in f64, to tell which descriptor reading is the right one.
    let truth: Vec<f64> = (0..M * 256)
        .map(|i| (0..K).map(|k| bf16_f64(a[(i / 256) * K + k]) * bf16_f64(b[(i % 256) * K + k])).sum())
        .collect();
    let nrms = |got: &[f32], n: usize| {
        let (mut e, mut r) = (0.0, 0.0);
        for (i, &g) in got.iter().enumerate() {
            let t = truth[(i / n) * 256 + i % n];
            e += (g as f64 - t).powi(2);
            r += t * t;
        }
        (e / r).sqrt()
    };
    let mma = run("probe_mma", 256, 256, 128, 0);
    let mma_nrms = nrms(&mma, 256);
    eprintln!("mma.sync chain: NRMS {mma_nrms:.2e} against f64");
    assert!(mma_nrms < 1e-5, "the mma.sync probe computes the wrong product (NRMS {mma_nrms:.2e})");

    let layout_check = run("probe_wgmma_8", 8, 0, 128, (M + 8) * K * 2);
    let e = nrms(&layout_check, 8);
    eprintln!("wgmma n8: NRMS {e:.2e} against f64");
    assert!(e < 1e-5, "the wgmma probe computes the wrong product (NRMS {e:.2e}): the descriptor layout is off");
    let mut same_as_mma = true;
    for n in NS {
        let smem = (M + n) * K * 2;
        let zeroed = run(&format!("probe_wgmma_{n}"), n, 0, 128, smem);
        let restarted = run(&format!("probe_wgmma_{n}"), n, 1, 128, smem);
        let differ = |x: &[f32]| (0..M * n).filter(|&i| x[i].to_bits() != mma[(i / n) * 256 + i % n].to_bits()).count();
        let (dz, dr) = (differ(&zeroed), differ(&restarted));
        let restart_diff = zeroed.iter().zip(&restarted).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
        eprintln!(
            "wgmma n{n}: {dz} of {} elements differ from mma.sync; scale-d=0 restart: {dr} differ from mma.sync, {restart_diff} from zeroed",
            M * n
        );
        same_as_mma &= dz == 0;
        assert_eq!(restart_diff, 0, "wgmma n{n}: a scale-d = 0 restart differs from zeroed accumulators");
    }
    // Fact 1 follows from fact 2 for every N; without fact 2, check N-invariance on its own.
    if !same_as_mma {
        let base = run("probe_wgmma_256", 256, 0, 128, (M + 256) * K * 2);
        for n in NS {
            let got = run(&format!("probe_wgmma_{n}"), n, 0, 128, (M + n) * K * 2);
            let diff = (0..M * n).filter(|&i| got[i].to_bits() != base[(i / n) * 256 + i % n].to_bits()).count();
            assert_eq!(diff, 0, "wgmma n{n} differs from n256 in {diff} elements: padding the token tile changes bits");
        }
    }
    eprintln!("mma_probe: wgmma == mma.sync bit for bit: {same_as_mma}");
    assert!(same_as_mma, "wgmma and mma.sync k16 chains differ: one canonical form cannot span both");
}
