//! The 32-element "legacy" formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//! Element `j < 16` of a 4/5-bit block is the low nibble of byte `j`; element `j + 16` the high one.

use super::f16_at;

pub(super) fn q4_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        out[j] = d * ((qs[j] & 0x0F) as i32 - 8) as f32;
        out[j + 16] = d * ((qs[j] >> 4) as i32 - 8) as f32;
    }
}

pub(super) fn q4_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qs = &b[4..20];
    for j in 0..16 {
        out[j] = d * (qs[j] & 0x0F) as f32 + m;
        out[j + 16] = d * (qs[j] >> 4) as f32 + m;
    }
}

pub(super) fn q5_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let lo = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4) as u8;
        let hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4) as u8;
        out[j] = d * (lo as i32 - 16) as f32;
        out[j + 16] = d * (hi as i32 - 16) as f32;
    }
}

pub(super) fn q5_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let lo = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4) as u8;
        let hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4) as u8;
        out[j] = d * lo as f32 + m;
        out[j + 16] = d * hi as f32 + m;
    }
}

pub(super) fn q8_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[2..34]) {
        *o = (q as i8) as f32 * d;
    }
}
