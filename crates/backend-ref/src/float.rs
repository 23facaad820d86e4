//! The float types the reference runs in.

use std::ops::{Add, Div, Mul, Sub};

/// f64 (the truth) or f32 (the floor).
pub trait RefFloat:
    Copy
    + Default
    + PartialOrd
    + Send
    + Sync
    + std::fmt::Debug
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
{
    const NAME: &'static str;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    fn sqrt(self) -> Self;
    fn exp(self) -> Self;
    /// ln(1 + self).
    fn ln_1p(self) -> Self;
    fn is_nan(self) -> bool;
    fn zero() -> Self {
        Self::from_f64(0.0)
    }
    fn one() -> Self {
        Self::from_f64(1.0)
    }
}

impl RefFloat for f64 {
    const NAME: &'static str = "float64";
    fn from_f64(x: f64) -> Self {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    fn exp(self) -> Self {
        f64::exp(self)
    }
    fn ln_1p(self) -> Self {
        f64::ln_1p(self)
    }
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
}

impl RefFloat for f32 {
    const NAME: &'static str = "float32";
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    fn exp(self) -> Self {
        f32::exp(self)
    }
    fn ln_1p(self) -> Self {
        f32::ln_1p(self)
    }
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
}
