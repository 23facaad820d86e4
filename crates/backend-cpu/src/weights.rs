//! The f32 weight values `linear` multiplies with, one 32-element block at a time.
//! For Q4_0 and Q8_0 they equal exact dequantization; for Q4_1 each weight is
//! `fma(q, d, m)` — one rounding instead of the reference dequantizer's two, so it is at least as
//! accurate. Every linear path (fused decode, tiled prefill) takes its weights from here, which
//! is what keeps them bit-identical to each other. Q4_K and Q6_K weights (256-element
//! super-blocks) are computed with exactly the operations of `dequant::dequant_row_kernel`, which
//! the tiled path expands them with.

use crate::simd::F32x16;

/// A 32-element block format with a fused kernel.
pub trait Block32 {
    const BYTES: usize;
    fn weights<S: F32x16>(b: &[u8]) -> [S; 2];
}

pub struct Q4_0;
pub struct Q4_1;
pub struct Q8_0;

impl Block32 for Q4_0 {
    const BYTES: usize = 18;
    #[inline(always)]
    fn weights<S: F32x16>(b: &[u8]) -> [S; 2] {
        let d = S::splat_f16(b, 0);
        let eight = S::splat(8.0);
        let (lo, hi) = S::nibbles(&b[2..]);
        [lo.sub(eight).mul(d), hi.sub(eight).mul(d)]
    }
}

impl Block32 for Q4_1 {
    const BYTES: usize = 20;
    #[inline(always)]
    fn weights<S: F32x16>(b: &[u8]) -> [S; 2] {
        let (d, m) = S::splat_f16_pair(b);
        let (lo, hi) = S::nibbles(&b[4..]);
        [lo.fma(d, m), hi.fma(d, m)]
    }
}

impl Block32 for Q8_0 {
    const BYTES: usize = 34;
    #[inline(always)]
    fn weights<S: F32x16>(b: &[u8]) -> [S; 2] {
        let d = S::splat_f16(b, 0);
        [S::from_i8(&b[2..]).mul(d), S::from_i8(&b[18..]).mul(d)]
    }
}

/// A format the fused decode kernel reads: super-blocks of `SUBS` 32-weight sub-blocks,
/// `BYTES` each, whose header (the scales) is decoded once per super-block and column.
pub trait Fused {
    const BYTES: usize;
    const SUBS: usize;
    type Header: Copy + Default;
    fn header<S: F32x16>(b: &[u8]) -> Self::Header;
    /// The 32 weights of sub-block `sub` of super-block `b`.
    fn sub<S: F32x16>(b: &[u8], h: &Self::Header, sub: usize) -> [S; 2];
}

macro_rules! fused_block32 {
    ($($t:ty),*) => {$(
        impl Fused for $t {
            const BYTES: usize = <$t as Block32>::BYTES;
            const SUBS: usize = 1;
            type Header = ();
            #[inline(always)]
            fn header<S: F32x16>(_: &[u8]) {}
            #[inline(always)]
            fn sub<S: F32x16>(b: &[u8], _: &(), _: usize) -> [S; 2] {
                <$t as Block32>::weights::<S>(b)
            }
        }
    )*};
}
fused_block32!(Q4_0, Q4_1, Q8_0);

pub struct Q4K;
pub struct Q6K;

impl Fused for Q4K {
    const BYTES: usize = 144;
    const SUBS: usize = 8;
    /// (d · scale, dmin · min) of each sub-block.
    type Header = ([f32; 8], [f32; 8]);
    #[inline(always)]
    fn header<S: F32x16>(b: &[u8]) -> Self::Header {
        // Loops, not closures, so this inlines into the caller's `#[target_feature]` kernel;
        // decode calls it once per 256 weights and column.
        let (d, dmin) = (S::f16_scalar(b, 0), S::f16_scalar(b, 2));
        let (sc, mn) = plumb_core::quant::k_scale_min(&b[4..16]);
        let (mut dl, mut ml) = ([0f32; 8], [0f32; 8]);
        for i in 0..8 {
            dl[i] = d * sc[i] as f32;
            ml[i] = dmin * mn[i] as f32;
        }
        (dl, ml)
    }
    #[inline(always)]
    fn sub<S: F32x16>(b: &[u8], h: &Self::Header, sub: usize) -> [S; 2] {
        let qs = &b[16 + (sub / 2) * 32..];
        let (dl, ml) = (S::splat(h.0[sub]), S::splat(h.1[sub]));
        let (q0, q1) = if sub.is_multiple_of(2) {
            (S::from_nibbles::<false>(qs), S::from_nibbles::<false>(&qs[16..]))
        } else {
            (S::from_nibbles::<true>(qs), S::from_nibbles::<true>(&qs[16..]))
        };
        [q0.mul(dl).sub(ml), q1.mul(dl).sub(ml)]
    }
}

impl Fused for Q6K {
    const BYTES: usize = 210;
    const SUBS: usize = 8;
    /// d · scale of each 16 weights.
    type Header = [f32; 16];
    #[inline(always)]
    fn header<S: F32x16>(b: &[u8]) -> Self::Header {
        let d = S::f16_scalar(b, 208);
        let mut dl = [0f32; 16];
        for (i, v) in dl.iter_mut().enumerate() {
            *v = d * (b[192 + i] as i8) as f32;
        }
        dl
    }
    #[inline(always)]
    fn sub<S: F32x16>(b: &[u8], h: &Self::Header, sub: usize) -> [S; 2] {
        [q6k_part::<S>(b, h, sub, 0), q6k_part::<S>(b, h, sub, 16)]
    }
}

/// Weights `l..l + 16` of sub-block `sub` of a Q6_K super-block (a function, not a closure, so
/// the intrinsics inline into the caller's `#[target_feature]` instantiation).
#[inline(always)]
fn q6k_part<S: F32x16>(b: &[u8], h: &[f32; 16], sub: usize, l: usize) -> S {
    let (ql, qh) = (&b[0..128], &b[128..192]);
    let (half, quarter) = (sub / 4, sub % 4);
    let lo_src = &ql[half * 64 + (quarter % 2) * 32 + l..];
    let lo = if quarter < 2 { S::from_nibbles::<false>(lo_src) } else { S::from_nibbles::<true>(lo_src) };
    let hi_src = &qh[half * 32 + l..];
    let hi = match quarter {
        0 => S::from_bits2::<0>(hi_src),
        1 => S::from_bits2::<2>(hi_src),
        2 => S::from_bits2::<4>(hi_src),
        _ => S::from_bits2::<6>(hi_src),
    };
    // q = (lo | hi << 4) - 32, exact in f32; then (d · scale) · q, as `dequant_row_kernel`.
    let q = hi.fma(S::splat(16.0), lo).sub(S::splat(32.0));
    S::splat(h[(half * 128 + quarter * 32 + l) / 16]).mul(q)
}

/// Writes one row's weights (`out.len()` elements) for block format `F`.
#[inline(always)]
pub fn row<S: F32x16, F: Block32>(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(F::BYTES)) {
        let [w0, w1] = F::weights::<S>(b);
        w0.store(&mut o[..16]);
        w1.store(&mut o[16..]);
    }
}
