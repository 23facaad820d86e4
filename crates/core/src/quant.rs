//! Exact dequantization of GGML block formats to f32.
//! Invariant: every value equals, bit for bit, what the `gguf` Python package's `dequantize`
//! produces — same f16→f32 widening, same order of f32 multiplies and adds, no fused multiply-add.
//! Fast kernels live in the backends; this is the definition they are checked against.

mod kquants;
mod legacy;

use crate::dtype::GgmlType;

/// Why a dequantization was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QuantError {
    #[error("plumb cannot dequantize tensors of type {0}")]
    UnsupportedType(GgmlType),
    #[error("{ty}: {num_elems} elements is not a whole number of {block_elems}-element blocks")]
    PartialBlock { ty: GgmlType, num_elems: usize, block_elems: usize },
    #[error("{ty}: {num_elems} elements need {expected} bytes, got {actual}")]
    SizeMismatch { ty: GgmlType, num_elems: usize, expected: usize, actual: usize },
}

/// Dequantizes `src` (whole blocks of type `ty`) into `dst`, whose length fixes the element count.
pub fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let info = match ty.info() {
        Some(info) if ty.can_dequantize() => info,
        _ => return Err(QuantError::UnsupportedType(ty)),
    };
    let num_elems = dst.len();
    if !num_elems.is_multiple_of(info.block_elems) {
        return Err(QuantError::PartialBlock { ty, num_elems, block_elems: info.block_elems });
    }
    let expected = num_elems / info.block_elems * info.block_bytes;
    if src.len() != expected {
        return Err(QuantError::SizeMismatch { ty, num_elems, expected, actual: src.len() });
    }
    let blocks = src.chunks_exact(info.block_bytes);
    let outs = dst.chunks_exact_mut(info.block_elems);
    let block_fn: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::F32 => |b, o| o[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        GgmlType::F16 => |b, o| o[0] = f16_at(b, 0),
        GgmlType::BF16 => |b, o| o[0] = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16),
        GgmlType::Q4_0 => legacy::q4_0,
        GgmlType::Q4_1 => legacy::q4_1,
        GgmlType::Q5_0 => legacy::q5_0,
        GgmlType::Q5_1 => legacy::q5_1,
        GgmlType::Q8_0 => legacy::q8_0,
        GgmlType::Q2_K => kquants::q2_k,
        GgmlType::Q3_K => kquants::q3_k,
        GgmlType::Q4_K => kquants::q4_k,
        GgmlType::Q5_K => kquants::q5_k,
        GgmlType::Q6_K => kquants::q6_k,
        _ => return Err(QuantError::UnsupportedType(ty)),
    };
    for (block, out) in blocks.zip(outs) {
        block_fn(block, out);
    }
    Ok(())
}

/// The little-endian f16 at byte `at`, widened exactly to f32.
#[inline(always)]
pub fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([bytes[at], bytes[at + 1]]))
}

/// Exact f16 → f32 widening in plain integer code, so it inlines into every kernel.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1F) as u32;
    let man = (h & 0x3FF) as u32;
    match exp {
        // Subnormal (or zero): man · 2⁻²⁴, exact in f32.
        0 => f32::from_bits(sign | (man as f32 * (1.0 / 16_777_216.0)).to_bits()),
        0x1F => f32::from_bits(sign | 0x7F80_0000 | (man << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (man << 13)),
    }
}

/// Byte offsets of the f16 scale (and min) fields inside one block of `ty`; empty for float types.
pub fn f16_field_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        _ => &[],
    }
}

/// Unpacks the 6-bit scales and mins of a Q4_K/Q5_K super-block (12 bytes → 8 + 8).
#[inline]
pub fn k_scale_min(scales: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
    for i in 0..4 {
        sc[i] = scales[i] & 0x3F;
        mn[i] = scales[4 + i] & 0x3F;
        sc[4 + i] = (scales[8 + i] & 0x0F) | ((scales[i] >> 2) & 0x30);
        mn[4 + i] = (scales[8 + i] >> 4) | ((scales[4 + i] >> 2) & 0x30);
    }
    (sc, mn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_widening_matches_half_for_every_value() {
        for bits in 0..=u16::MAX {
            let want = half::f16::from_bits(bits).to_f32();
            let got = f16_to_f32(bits);
            assert!(want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()), "{bits:#06x}");
        }
    }
}
