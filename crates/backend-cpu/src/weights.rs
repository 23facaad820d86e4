//! The f32 weight values `linear` multiplies with, one 32-element block at a time.
//! For Q4_0 and Q8_0 they equal exact dequantization; for Q4_1 each weight is
//! `fma(q, d, m)` — one rounding instead of the reference dequantizer's two, so it is at least as
//! accurate. Every linear path (fused decode, tiled prefill) takes its weights from here, which
//! is what keeps them bit-identical to each other. Q4_K weights (256-element super-blocks) are
//! likewise one FMA, `q · (d · scale) − dmin · min`; Q6_K weights equal exact dequantization.

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
        let (lo, hi) = S::nibbles_centered(&b[2..], S::splat_f16(b, 0));
        [lo, hi]
    }
}

impl Block32 for Q4_1 {
    const BYTES: usize = 20;
    #[inline(always)]
    fn weights<S: F32x16>(b: &[u8]) -> [S; 2] {
        let (d, m) = S::splat_f16_pair(b);
        let (lo, hi) = S::nibbles_fma(&b[4..], (d, m), (d, m));
        [lo, hi]
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
/// `BYTES` each, whose header (the scales) is decoded once per super-block and column, and
/// whose weights come `GROUP` sub-blocks at a time (sub-blocks that share packed bytes are
/// unpacked together).
pub trait Fused {
    const BYTES: usize;
    const SUBS: usize;
    /// Sub-blocks `group` yields per call (1, 2 or 4).
    const GROUP: usize;
    type Header: Copy + Default;
    fn header<S: F32x16>(b: &[u8]) -> Self::Header;
    /// The weights of sub-blocks `g·GROUP .. (g + 1)·GROUP` of super-block `b`, into
    /// `out[..2·GROUP]` in weight order (16 per vector).
    fn group<S: F32x16>(b: &[u8], h: &Self::Header, g: usize, out: &mut [S; 8]);
}

macro_rules! fused_block32 {
    ($($t:ty),*) => {$(
        impl Fused for $t {
            const BYTES: usize = <$t as Block32>::BYTES;
            const SUBS: usize = 1;
            const GROUP: usize = 1;
            type Header = ();
            #[inline(always)]
            fn header<S: F32x16>(_: &[u8]) {}
            #[inline(always)]
            fn group<S: F32x16>(b: &[u8], _: &(), _: usize, out: &mut [S; 8]) {
                [out[0], out[1]] = <$t as Block32>::weights::<S>(b);
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
    /// Sub-blocks 2j and 2j + 1 are the low and high nibbles of the same 32 bytes.
    const GROUP: usize = 2;
    /// (d · scale, −(dmin · min)) of each sub-block.
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
            ml[i] = -(dmin * mn[i] as f32);
        }
        (dl, ml)
    }
    /// Weight = q · (d · scale) − dmin · min with one rounding (an FMA): at least as accurate
    /// as the dequantizer's product-then-difference.
    #[inline(always)]
    fn group<S: F32x16>(b: &[u8], h: &Self::Header, g: usize, out: &mut [S; 8]) {
        let qs = &b[16 + g * 32..];
        let lo = (S::splat(h.0[2 * g]), S::splat(h.1[2 * g]));
        let hi = (S::splat(h.0[2 * g + 1]), S::splat(h.1[2 * g + 1]));
        (out[0], out[2]) = S::nibbles_fma(qs, lo, hi);
        (out[1], out[3]) = S::nibbles_fma(&qs[16..], lo, hi);
    }
}

impl Fused for Q6K {
    const BYTES: usize = 210;
    const SUBS: usize = 8;
    /// A half super-block (128 weights) shares its packed bytes.
    const GROUP: usize = 4;
    /// (d · scale, −32 · d · scale) of each 16 weights.
    type Header = ([f32; 16], [f32; 16]);
    #[inline(always)]
    fn header<S: F32x16>(b: &[u8]) -> Self::Header {
        let d = S::f16_scalar(b, 208);
        let (mut dl, mut off) = ([0f32; 16], [0f32; 16]);
        for i in 0..16 {
            dl[i] = d * (b[192 + i] as i8) as f32;
            // Exact: a power of two times a float.
            off[i] = -32.0 * dl[i];
        }
        (dl, off)
    }
    /// Weight = fma(q, d · scale, −32 · d · scale): the real value (d · scale) · (q − 32) that
    /// exact dequantization rounds once, so the same value, except that a zero weight is +0
    /// (dequantization gives −0 where d · scale < 0) — one FMA instead of an integer
    /// subtraction and a product.
    #[inline(always)]
    fn group<S: F32x16>(b: &[u8], h: &Self::Header, g: usize, out: &mut [S; 8]) {
        let q = S::q6_half(&b[g * 64..], &b[128 + g * 32..]);
        for v in 0..8 {
            out[v] = q[v].fma(S::splat(h.0[8 * g + v]), S::splat(h.1[8 * g + v]));
        }
    }
}

/// Writes one row's weights (`out.len()` elements) as the fused kernel computes them, for
/// super-block format `F`: the tiled path expands K-quant tiles with this.
#[inline(always)]
pub fn row_fused<S: F32x16, F: Fused>(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.chunks_exact_mut(32 * F::SUBS).zip(bytes.chunks_exact(F::BYTES)) {
        let h = F::header::<S>(b);
        let mut w = [S::zero(); 8];
        for g in 0..F::SUBS / F::GROUP {
            F::group::<S>(b, &h, g, &mut w);
            for (v, wv) in w.iter().enumerate().take(2 * F::GROUP) {
                wv.store(&mut o[(g * 2 * F::GROUP + v) * 16..]);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dequant::tests::valid_blocks;
    use crate::simd::{Isa, simd_dispatch};
    use plumb_core::{GgmlType, dequantize, quant::k_scale_min};

    simd_dispatch! {
        fn expand(ty: GgmlType, bytes: &[u8], out: &mut [f32]) => expand_kernel
    }

    #[inline(always)]
    fn expand_kernel<S: F32x16>(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
        match ty {
            GgmlType::Q4_K => row_fused::<S, Q4K>(bytes, out),
            _ => row_fused::<S, Q6K>(bytes, out),
        }
    }

    /// Q6_K weights are exact dequantization on every ISA (a zero weight +0); Q4_K weights are
    /// the one-rounding `fma(q, d · scale, −dmin · min)`, element by element.
    #[test]
    fn k_quant_weights_follow_their_rule_on_every_isa() {
        let n = 6;
        let q6 = valid_blocks(GgmlType::Q6_K, n, 7);
        let mut want6 = vec![0f32; 256 * n];
        dequantize(GgmlType::Q6_K, &q6, &mut want6).unwrap();
        for w in &mut want6 {
            *w += 0.0;
        }
        let q4 = valid_blocks(GgmlType::Q4_K, n, 8);
        let mut want4 = vec![0f32; 256 * n];
        for (o, b) in want4.chunks_exact_mut(256).zip(q4.chunks_exact(144)) {
            let f16 = |at: usize| half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32();
            let (sc, mn) = k_scale_min(&b[4..16]);
            for (i, w) in o.iter_mut().enumerate() {
                let (sub, j) = (i / 32, i % 32);
                let byte = b[16 + (sub / 2) * 32 + j];
                let q = if sub % 2 == 0 { byte & 15 } else { byte >> 4 } as f32;
                *w = q.mul_add(f16(0) * sc[sub] as f32, -(f16(2) * mn[sub] as f32));
            }
        }
        for isa in Isa::available() {
            for (ty, bytes, want) in [(GgmlType::Q6_K, &q6, &want6), (GgmlType::Q4_K, &q4, &want4)] {
                let mut got = vec![f32::NAN; 256 * n];
                expand(isa, ty, bytes, &mut got);
                let diff = want.iter().zip(&got).position(|(a, b)| a.to_bits() != b.to_bits());
                assert_eq!(diff, None, "{ty} on {isa:?}: first differing weight");
            }
        }
    }
}
