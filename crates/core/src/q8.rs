//! Q8 activations: the declared precision [`LinearInputs::Q8`](crate::LinearInputs::Q8), in which
//! `linear` rounds each 32-value block of an input row to int8 codes with one f32 scale, the way
//! llama.cpp's Q8 activation blocks do, so that integer dot products (VNNI) can take it.
//! This module is the one definition every backend and the reference share; it owns no kernels.
//! Invariant: a block's codes and scale depend on its own 32 values only (never on other rows or
//! blocks), so a row's products do not depend on what else is in the batch.

/// Values per block.
pub const Q8_BLOCK: usize = 32;

/// The largest code magnitude.
pub const Q8_MAX: f32 = 127.0;

/// One quantized block: `x ≈ code · scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Q8Block {
    /// max |x| / 127 (f32 division); 0 for a block of zeros; NaN when any value is NaN or infinite,
    /// so that a non-finite input reaches the output instead of being rounded away.
    pub scale: f32,
    /// round(x / scale) (f32 division, ties to even), in −127..=127; all 0 when the scale is 0 or NaN.
    pub codes: [i8; Q8_BLOCK],
}

impl Q8Block {
    /// Sum of the codes (exact).
    pub fn code_sum(&self) -> i32 {
        self.codes.iter().map(|&q| q as i32).sum()
    }
}

/// Quantizes one block of 32 values.
pub fn quantize_block(x: &[f32]) -> Q8Block {
    assert_eq!(x.len(), Q8_BLOCK, "a Q8 block holds {Q8_BLOCK} values");
    let mut codes = [0i8; Q8_BLOCK];
    if x.iter().any(|v| !v.is_finite()) {
        return Q8Block { scale: f32::NAN, codes };
    }
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let scale = amax / Q8_MAX;
    if scale == 0.0 {
        return Q8Block { scale, codes };
    }
    for (q, &v) in codes.iter_mut().zip(x) {
        *q = (v / scale).round_ties_even().clamp(-Q8_MAX, Q8_MAX) as i8;
    }
    Q8Block { scale, codes }
}

/// Every block of `x` (a whole number of blocks: rows of K a multiple of 32, back to back).
pub fn quantize(x: &[f32]) -> Vec<Q8Block> {
    assert!(x.len().is_multiple_of(Q8_BLOCK), "Q8 activations come in whole blocks of {Q8_BLOCK}");
    x.chunks_exact(Q8_BLOCK).map(quantize_block).collect()
}

/// `x` as Q8 products see it, in float64, where `code · scale` is exact.
pub fn round_trip_f64(x: &[f32]) -> Vec<f64> {
    quantize(x).iter().flat_map(|b| b.codes.map(|q| q as f64 * b.scale as f64)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_reach_the_extremes_and_round_ties_to_even() {
        let mut x = [0f32; 32];
        x[0] = 127.0;
        x[1] = -127.0;
        x[2] = 2.5;
        x[3] = 3.5;
        x[4] = -0.5;
        let b = quantize_block(&x);
        assert_eq!(b.scale, 1.0);
        assert_eq!(&b.codes[..5], &[127, -127, 2, 4, 0]);
        assert_eq!(b.code_sum(), 6);
    }

    #[test]
    fn zeros_give_a_zero_scale_and_non_finite_values_a_nan_one() {
        assert_eq!(quantize_block(&[0.0; 32]), Q8Block { scale: 0.0, codes: [0; 32] });
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = [1.0f32; 32];
            x[7] = bad;
            assert!(quantize_block(&x).scale.is_nan());
            assert!(round_trip_f64(&x).iter().all(|v| v.is_nan()));
        }
    }

    #[test]
    fn round_trip_error_is_at_most_half_a_step() {
        let x: Vec<f32> = (0..64).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.173 + (i as f32).sin()).collect();
        let blocks = quantize(&x);
        for (i, (&v, r)) in x.iter().zip(round_trip_f64(&x)).enumerate() {
            let step = blocks[i / 32].scale as f64;
            assert!((v as f64 - r).abs() <= 0.5 * step * (1.0 + 1e-6), "value {i}: {v} vs {r}");
        }
    }
}
