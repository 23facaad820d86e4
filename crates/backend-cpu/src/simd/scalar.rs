//! Portable `F32x16`: the definition the vector implementations must match lane for lane.

use super::F32x16;
use half::{bf16, f16};

#[derive(Clone, Copy, Debug)]
pub struct Scalar([f32; 16]);

impl Scalar {
    #[inline(always)]
    fn map(self, b: Self, f: impl Fn(f32, f32) -> f32) -> Self {
        Scalar(std::array::from_fn(|i| f(self.0[i], b.0[i])))
    }
}

impl F32x16 for Scalar {
    const ONE_REGISTER: bool = true;
    #[inline(always)]
    fn zero() -> Self {
        Scalar([0.0; 16])
    }
    #[inline(always)]
    fn splat(x: f32) -> Self {
        Scalar([x; 16])
    }
    #[inline(always)]
    fn load(s: &[f32]) -> Self {
        Scalar(s[..16].try_into().expect("16 lanes"))
    }
    #[inline(always)]
    fn store(self, s: &mut [f32]) {
        s[..16].copy_from_slice(&self.0);
    }
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        self.map(b, |x, y| x + y)
    }
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        self.map(b, |x, y| x - y)
    }
    #[inline(always)]
    fn mul(self, b: Self) -> Self {
        self.map(b, |x, y| x * y)
    }
    #[inline(always)]
    fn div(self, b: Self) -> Self {
        self.map(b, |x, y| x / y)
    }
    #[inline(always)]
    fn fma(self, b: Self, c: Self) -> Self {
        Scalar(std::array::from_fn(|i| self.0[i].mul_add(b.0[i], c.0[i])))
    }
    #[inline(always)]
    fn max(self, b: Self) -> Self {
        // x86 `max` semantics: the second operand when either is NaN or both are zero.
        self.map(b, |x, y| if x > y { x } else { y })
    }
    #[inline(always)]
    fn min(self, b: Self) -> Self {
        self.map(b, |x, y| if x < y { x } else { y })
    }
    #[inline(always)]
    fn round(self) -> Self {
        Scalar(self.0.map(f32::round_ties_even))
    }
    #[inline(always)]
    fn pow2i(self) -> Self {
        Scalar(self.0.map(|n| f32::from_bits(((n as i32 + 127) as u32) << 23)))
    }
    #[inline(always)]
    fn hsum(self) -> f32 {
        let a = self.0;
        let b: [f32; 8] = std::array::from_fn(|i| a[i] + a[i + 8]);
        let c: [f32; 4] = std::array::from_fn(|i| b[i] + b[i + 4]);
        let d: [f32; 2] = std::array::from_fn(|i| c[i] + c[i + 2]);
        d[0] + d[1]
    }
    #[inline(always)]
    fn hmax(self) -> f32 {
        self.0.into_iter().fold(f32::NEG_INFINITY, |m, x| if x > m { x } else { m })
    }
    #[inline(always)]
    fn from_nibbles<const HIGH: bool>(q: &[u8]) -> Self {
        Scalar(std::array::from_fn(|i| if HIGH { (q[i] >> 4) as f32 } else { (q[i] & 0x0F) as f32 }))
    }
    #[inline(always)]
    fn from_i8(q: &[u8]) -> Self {
        Scalar(std::array::from_fn(|i| q[i] as i8 as f32))
    }
    #[inline(always)]
    fn from_f16(q: &[u8]) -> Self {
        Scalar(std::array::from_fn(|i| f16::from_le_bytes([q[2 * i], q[2 * i + 1]]).to_f32()))
    }
    #[inline(always)]
    fn from_bf16(q: &[u8]) -> Self {
        Scalar(std::array::from_fn(|i| bf16::from_le_bytes([q[2 * i], q[2 * i + 1]]).to_f32()))
    }
    #[inline(always)]
    fn f16_scalar(q: &[u8], at: usize) -> f32 {
        plumb_core::quant::f16_at(q, at)
    }
}
