//! The 256-element K-quant super-blocks: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
//! Layouts follow ggml's `block_qN_K` structs; each super-block holds 16 or 8 sub-blocks whose
//! scale is `d * sub_scale` (and min `dmin * sub_min`), computed in f32 before the element product.

use super::{f16_at, k_scale_min};

pub(super) fn q2_k(b: &[u8], out: &mut [f32]) {
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
    for (idx, o) in out.iter_mut().enumerate() {
        let (half, shift, l) = (idx / 128, (idx / 32) % 4, idx % 32);
        let q = (qs[half * 32 + l] >> (2 * shift)) & 3;
        let sc = scales[idx / 16];
        let dl = d * (sc & 0x0F) as f32;
        let ml = dmin * (sc >> 4) as f32;
        *o = dl * q as f32 - ml;
    }
}

pub(super) fn q3_k(b: &[u8], out: &mut [f32]) {
    let (hmask, qs, packed) = (&b[0..32], &b[32..96], &b[96..108]);
    let d = f16_at(b, 108);
    let mut scales = [0f32; 16];
    for (i, s) in scales.iter_mut().enumerate() {
        let low = (packed[i % 8] >> (4 * (i / 8))) & 0x0F;
        let high = (packed[8 + i % 4] >> (2 * (i / 4))) & 0x03;
        *s = ((low | (high << 4)) as i8 - 32) as f32;
    }
    for (idx, o) in out.iter_mut().enumerate() {
        let (half, shift, l) = (idx / 128, (idx / 32) % 4, idx % 32);
        let low = ((qs[half * 32 + l] >> (2 * shift)) & 3) as i8;
        // A set hmask bit means "no offset"; a clear one subtracts 4.
        let high = ((hmask[l] >> (idx / 32)) & 1) ^ 1;
        let q = low - ((high << 2) as i8);
        *o = (d * scales[idx / 16]) * q as f32;
    }
}

pub(super) fn q4_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (sc, mn) = k_scale_min(&b[4..16]);
    let qs = &b[16..144];
    for (idx, o) in out.iter_mut().enumerate() {
        let (sub, l) = (idx / 32, idx % 32);
        let q = (qs[(sub / 2) * 32 + l] >> (4 * (sub % 2))) & 0x0F;
        let dl = d * sc[sub] as f32;
        let ml = dmin * mn[sub] as f32;
        *o = dl * q as f32 - ml;
    }
}

pub(super) fn q5_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (sc, mn) = k_scale_min(&b[4..16]);
    let (qh, qs) = (&b[16..48], &b[48..176]);
    for (idx, o) in out.iter_mut().enumerate() {
        let (sub, l) = (idx / 32, idx % 32);
        let low = (qs[(sub / 2) * 32 + l] >> (4 * (sub % 2))) & 0x0F;
        let high = (qh[l] >> sub) & 1;
        let q = low | (high << 4);
        let dl = d * sc[sub] as f32;
        let ml = dmin * mn[sub] as f32;
        *o = dl * q as f32 - ml;
    }
}

pub(super) fn q6_k(b: &[u8], out: &mut [f32]) {
    let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = f16_at(b, 208);
    for (idx, o) in out.iter_mut().enumerate() {
        let (half, quarter, l) = (idx / 128, (idx / 32) % 4, idx % 32);
        let low = (ql[half * 64 + (quarter % 2) * 32 + l] >> (4 * (quarter / 2))) & 0x0F;
        let high = (qh[half * 32 + l] >> (2 * quarter)) & 3;
        let q = (low | (high << 4)) as i8 - 32;
        *o = (d * (scales[idx / 16] as i8) as f32) * q as f32;
    }
}
