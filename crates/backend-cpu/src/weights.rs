//! The f32 weight values `linear` multiplies with, one 32-element block at a time.
//! For Q4_0 and Q8_0 they equal exact dequantization; for Q4_1 each weight is
//! `fma(q, d, m)` — one rounding instead of the reference dequantizer's two, so it is at least as
//! accurate. Every linear path (fused decode, tiled prefill) takes its weights from here, which
//! is what keeps them bit-identical to each other.

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

/// Writes one row's weights (`out.len()` elements) for block format `F`.
#[inline(always)]
pub fn row<S: F32x16, F: Block32>(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(F::BYTES)) {
        let [w0, w1] = F::weights::<S>(b);
        w0.store(&mut o[..16]);
        w1.store(&mut o[16..]);
    }
}
