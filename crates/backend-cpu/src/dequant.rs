//! Fast exact dequantization of one weight row to f32, per format.
//! Invariant: bit-identical to `plumb_core::dequantize` (the tests compare every format); the
//! SIMD paths only reorder independent element computations, never an element's own arithmetic.

use crate::simd::{F32x16, simd_dispatch};
use plumb_core::{GgmlType, dequantize, quant::k_scale_min};

simd_dispatch! {
    /// Dequantizes one row (`bytes` holds exactly `out.len()` elements of `ty`).
    pub fn dequant_row(ty: GgmlType, bytes: &[u8], out: &mut [f32]) => dequant_row_kernel
}

#[inline(always)]
pub(crate) fn dequant_row_kernel<S: F32x16>(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    match ty {
        GgmlType::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        GgmlType::F16 if out.len().is_multiple_of(16) => {
            for (o, b) in out.chunks_exact_mut(16).zip(bytes.chunks_exact(32)) {
                S::from_f16(b).store(o);
            }
        }
        GgmlType::BF16 if out.len().is_multiple_of(16) => {
            for (o, b) in out.chunks_exact_mut(16).zip(bytes.chunks_exact(32)) {
                S::from_bf16(b).store(o);
            }
        }
        GgmlType::Q4_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(18)) {
                let d = S::splat(S::f16_scalar(b, 0));
                let eight = S::splat(8.0);
                S::from_nibbles::<false>(&b[2..]).sub(eight).mul(d).store(&mut o[..16]);
                S::from_nibbles::<true>(&b[2..]).sub(eight).mul(d).store(&mut o[16..]);
            }
        }
        GgmlType::Q4_1 => {
            for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(20)) {
                let (d, m) = (S::splat(S::f16_scalar(b, 0)), S::splat(S::f16_scalar(b, 2)));
                S::from_nibbles::<false>(&b[4..]).mul(d).add(m).store(&mut o[..16]);
                S::from_nibbles::<true>(&b[4..]).mul(d).add(m).store(&mut o[16..]);
            }
        }
        GgmlType::Q8_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(34)) {
                let d = S::splat(S::f16_scalar(b, 0));
                S::from_i8(&b[2..]).mul(d).store(&mut o[..16]);
                S::from_i8(&b[18..]).mul(d).store(&mut o[16..]);
            }
        }
        GgmlType::Q4_K => {
            for (o, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(144)) {
                let (d, dmin) = (S::f16_scalar(b, 0), S::f16_scalar(b, 2));
                let (sc, mn) = k_scale_min(&b[4..16]);
                for sub in 0..8 {
                    let dl = S::splat(d * sc[sub] as f32);
                    let ml = S::splat(dmin * mn[sub] as f32);
                    let qs = &b[16 + (sub / 2) * 32..];
                    for half in 0..2 {
                        let q = if sub % 2 == 0 {
                            S::from_nibbles::<false>(&qs[half * 16..])
                        } else {
                            S::from_nibbles::<true>(&qs[half * 16..])
                        };
                        q.mul(dl).sub(ml).store(&mut o[sub * 32 + half * 16..]);
                    }
                }
            }
        }
        // The fused kernel's unpacking (a half super-block at a time), then the definition's
        // (d · scale) · (q − 32), bit for bit (the test below).
        GgmlType::Q6_K => {
            let thirty_two = S::splat(32.0);
            for (o, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(210)) {
                let d = S::f16_scalar(b, 208);
                for half in 0..2 {
                    let q = S::q6_half(&b[half * 64..], &b[128 + half * 32..]);
                    for (v, q) in q.iter().enumerate() {
                        let dl = S::splat(d * (b[192 + 8 * half + v] as i8) as f32);
                        dl.mul(q.sub(thirty_two)).store(&mut o[(8 * half + v) * 16..]);
                    }
                }
            }
        }
        _ => dequantize(ty, bytes, out).expect("row geometry validated when the weight was loaded"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::simd::Isa;

    pub(crate) fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (s >> 33) as u8
            })
            .collect()
    }

    /// Random blocks whose f16 fields are finite (scales and mins live at fixed offsets).
    pub(crate) fn valid_blocks(ty: GgmlType, num_blocks: usize, seed: u64) -> Vec<u8> {
        let info = ty.info().unwrap();
        let mut bytes = random_bytes(num_blocks * info.block_bytes, seed);
        let f16_fields = plumb_core::quant::f16_field_offsets(ty);
        for block in bytes.chunks_exact_mut(info.block_bytes) {
            for &at in f16_fields {
                block[at + 1] &= 0x3B; // exponent below 0x1F: finite, magnitude < 1
            }
            if matches!(ty, GgmlType::F16 | GgmlType::BF16) {
                block[1] &= 0x3B;
            }
        }
        bytes
    }

    #[test]
    fn every_isa_matches_the_exact_definition() {
        for ty in GgmlType::DEQUANTIZABLE {
            let info = ty.info().unwrap();
            let num_elems = 256 * 4;
            let bytes = valid_blocks(ty, num_elems / info.block_elems, ty.id() as u64);
            let mut want = vec![0f32; num_elems];
            dequantize(ty, &bytes, &mut want).unwrap();
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; num_elems];
                dequant_row(isa, ty, &bytes, &mut got);
                let same = want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{ty} on {isa:?} differs from the definition");
            }
        }
    }
}
