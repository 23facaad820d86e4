//! The attention epilogues divide by one divisor many times (`kernels/divide.cu`): the divisor's
//! reciprocal refined once, then div.rn's fast path for each quotient, under one range check.
//! They claim __fdiv_rn's bits. This test holds them to it on a GPU (the emulator's reciprocal is
//! not the GPU's MUFU.RCP, so it is not in CI's emulated set): millions of random pairs across
//! the range the check admits, plus the mantissas where rounding is closest to a tie, compared
//! bit for bit with __fdiv_rn; and the check must turn away 0, inf, NaN and operands past its
//! range, which take __fdiv_rn itself.

#[path = "support/device.rs"]
mod device;

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};

const PROBE: &str = r#"
extern "C" __global__ void division_probe(const float* a, const float* b, unsigned* fast, unsigned* exact,
                                          unsigned* ok, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const DivBy d = div_by(b[i]);
    fast[i] = __float_as_uint(div_fast(a[i], d));
    exact[i] = __float_as_uint(__fdiv_rn(a[i], b[i]));
    ok[i] = div_fast_ok(a[i]) && div_fast_ok(b[i]);
}
"#;

fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// A float of either sign with a random mantissa and an exponent in [lo, hi].
fn random_float(state: &mut u64, lo: i32, hi: i32) -> f32 {
    let r = next(state);
    let e = lo + (r % (hi - lo + 1) as u64) as i32;
    let bits = ((e + 127) as u32) << 23 | (r >> 32) as u32 & 0x7f_ffff | ((r >> 63) as u32) << 31;
    f32::from_bits(bits)
}

#[test]
fn one_reciprocal_for_many_quotients_gives_fdiv_rn_bits() {
    let Some(backend) = device::backend("division") else { return };
    if plumb_core::Backend::name(&backend).contains("emulation") {
        eprintln!("division: skipped on the emulator, whose reciprocal is not the GPU's");
        return;
    }
    let ctx = CudaContext::new(0).expect("context");
    let stream = ctx.default_stream();
    let source = format!("{}\n{PROBE}", include_str!("../src/kernels/divide.cu"));
    let opts = cudarc::nvrtc::CompileOptions { arch: Some("sm_90a"), fmad: Some(false), ..Default::default() };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(source, opts).unwrap_or_else(|e| panic!("probe compile: {e:?}"));
    let module = ctx.load_module(ptx).expect("probe module");
    let f = module.load_function("division_probe").expect("division_probe");
    let mut rng = device::seed() | 1;

    let (mut a, mut b) = (Vec::new(), Vec::new());
    // The whole admitted range, and the attention's own (l from 1 to a context, sums of e · v).
    for _ in 0..3_000_000 {
        a.push(random_float(&mut rng, -60, 59));
        b.push(random_float(&mut rng, -60, 59));
    }
    for _ in 0..3_000_000 {
        a.push(random_float(&mut rng, -30, 20));
        b.push(random_float(&mut rng, 0, 17).abs());
    }
    // Divisors with mantissas of all ones, all zeros and near both (reciprocals closest to a
    // rounding tie), over numerators with the same kinds of mantissas.
    let edges: Vec<u32> = (0..64).flat_map(|k| [k, 0x7f_ffff - k, 0x40_0000 + k, 0x3f_ffff - k]).collect();
    for &mb in &edges {
        for &ma in &edges {
            for (ea, eb) in [(0, 0), (0, 9), (13, 3), (-7, 5)] {
                a.push(f32::from_bits(((ea + 127) as u32) << 23 | ma));
                b.push(f32::from_bits(((eb + 127) as u32) << 23 | mb));
            }
        }
    }
    // What the check must turn away.
    let out_of_range =
        [0.0f32, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-30, 1e30, f32::MIN_POSITIVE, 1e-40, f32::MAX];
    for &x in &out_of_range {
        a.extend([x, 1.5]);
        b.extend([3.0, x]);
    }
    let n = a.len();
    let (a_dev, b_dev) = (stream.clone_htod(&a).unwrap(), stream.clone_htod(&b).unwrap());
    let mut fast = stream.alloc_zeros::<u32>(n).unwrap();
    let mut exact = stream.alloc_zeros::<u32>(n).unwrap();
    let mut ok = stream.alloc_zeros::<u32>(n).unwrap();
    let cfg = LaunchConfig { grid_dim: (n.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let mut l = stream.launch_builder(&f);
    let n_arg = n as i32;
    l.arg(&a_dev).arg(&b_dev).arg(&mut fast).arg(&mut exact).arg(&mut ok).arg(&n_arg);
    // SAFETY: the probe reads a[n] and b[n] and writes fast, exact and ok [n], all allocated above.
    unsafe { l.launch(cfg) }.expect("probe launch");
    let (fast, exact, ok) =
        (stream.clone_dtoh(&fast).unwrap(), stream.clone_dtoh(&exact).unwrap(), stream.clone_dtoh(&ok).unwrap());

    let admitted = ok.iter().filter(|&&o| o == 1).count();
    let mut wrong = Vec::new();
    for i in 0..n {
        if ok[i] == 1 && fast[i] != exact[i] {
            wrong.push(i);
        }
        // __fdiv_rn on the GPU is IEEE division: the host's f32 division agrees everywhere.
        let host = a[i] / b[i];
        assert!(
            exact[i] == host.to_bits() || (host.is_nan() && f32::from_bits(exact[i]).is_nan()),
            "__fdiv_rn({:e}, {:e}) = {:e}, the host's {host:e}",
            a[i],
            b[i],
            f32::from_bits(exact[i])
        );
    }
    assert!(
        wrong.is_empty(),
        "{} of {admitted} admitted quotients differ from __fdiv_rn, the first: {:?}",
        wrong.len(),
        wrong.iter().take(5).map(|&i| (a[i], b[i], f32::from_bits(fast[i]), f32::from_bits(exact[i]))).collect::<Vec<_>>()
    );
    let tail = n - 2 * out_of_range.len();
    for (j, &x) in out_of_range.iter().enumerate() {
        assert_eq!(ok[tail + 2 * j], 0, "{x:e} as the numerator is admitted");
        assert_eq!(ok[tail + 2 * j + 1], 0, "{x:e} as the divisor is admitted");
    }
    assert!(admitted >= n - 2 * out_of_range.len(), "only {admitted} of {n} in-range pairs admitted");
    eprintln!("division: {admitted} quotients, every one with __fdiv_rn's bits");
}
