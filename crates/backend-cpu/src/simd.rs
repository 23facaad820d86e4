//! `F32x16`: sixteen f32 lanes with one arithmetic contract on every instruction set.
//! AVX-512, AVX2 (two halves) and portable scalar code perform the same IEEE operations lane by
//! lane — fused multiply-add where the kernels ask for it, and the same fixed pairwise tree in
//! `hsum` — so a kernel written once gives bit-identical results whichever ISA runs it.

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q8_avx2;
pub mod scalar;
#[cfg(target_arch = "x86_64")]
pub(crate) mod vnni;

/// Lanes per vector.
pub const LANES: usize = 16;

/// The instruction sets the kernels are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IsaKind {
    Avx512,
    Avx2,
    Scalar,
}

/// An instruction set that the running CPU supports. A value can only be obtained from
/// [`Isa::detect`], [`Isa::new`] or [`Isa::available`], which check the CPU first — so holding an
/// `Isa` proves its instructions are safe to execute, which is what `simd_dispatch!` relies on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Isa(IsaKind);

impl std::fmt::Debug for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl Isa {
    /// Portable code: always available.
    pub const SCALAR: Isa = Isa(IsaKind::Scalar);

    /// Whether this CPU can run `kind`.
    pub fn cpu_has(kind: IsaKind) -> bool {
        match kind {
            IsaKind::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            IsaKind::Avx2 => {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            IsaKind::Avx512 => {
                Self::cpu_has(IsaKind::Avx2)
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512dq")
                    && is_x86_feature_detected!("avx512vl")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// `kind`, if this CPU supports it.
    pub fn new(kind: IsaKind) -> Option<Isa> {
        Self::cpu_has(kind).then_some(Isa(kind))
    }

    /// Every instruction set this CPU supports, best first.
    pub fn available() -> Vec<Isa> {
        [IsaKind::Avx512, IsaKind::Avx2, IsaKind::Scalar].into_iter().filter_map(Isa::new).collect()
    }

    /// The best instruction set this CPU supports (`PLUMB_ISA=avx2|scalar` forces a lower one).
    pub fn detect() -> Isa {
        let forced = match std::env::var("PLUMB_ISA").ok().as_deref() {
            Some("scalar") => Some(IsaKind::Scalar),
            Some("avx2") => Some(IsaKind::Avx2),
            _ => None,
        };
        forced.and_then(Isa::new).unwrap_or_else(|| Self::available()[0])
    }

    pub fn kind(self) -> IsaKind {
        self.0
    }
}

/// Sixteen f32 lanes. Every method is `#[inline(always)]` in its implementations so a kernel
/// instantiated inside a `#[target_feature]` entry point compiles to straight vector code.
pub trait F32x16: Copy {
    /// Whether a value fills one architectural register (AVX-512, and the scalar code's
    /// emulation) rather than two (AVX2, whose sixteen ymm registers hold eight values): kernels
    /// pick tile shapes whose accumulators stay in registers. Shapes never change an element's
    /// arithmetic, so the bits do not depend on it.
    const ONE_REGISTER: bool;
    fn zero() -> Self;
    fn splat(x: f32) -> Self;
    /// Loads `s[..16]`.
    fn load(s: &[f32]) -> Self;
    /// Stores into `s[..16]`.
    fn store(self, s: &mut [f32]);
    fn add(self, b: Self) -> Self;
    fn sub(self, b: Self) -> Self;
    fn mul(self, b: Self) -> Self;
    fn div(self, b: Self) -> Self;
    /// self · b + c with one rounding.
    fn fma(self, b: Self, c: Self) -> Self;
    fn max(self, b: Self) -> Self;
    fn min(self, b: Self) -> Self;
    /// Round to nearest integer, ties to even.
    fn round(self) -> Self;
    /// 2^self for integral lanes in [-126, 127].
    fn pow2i(self) -> Self;
    /// Sum of lanes by the fixed tree ((i, i+8), then (i, i+4), (i, i+2), (i, i+1)).
    fn hsum(self) -> f32;
    /// `hsum` of sixteen vectors at once: lane i of the result is `v[i].hsum()`, bit for bit
    /// (the same additions of the same pairs; only how they are laid out in registers differs).
    #[inline(always)]
    fn hsum16(v: &[Self; 16]) -> Self {
        let mut lanes = [0f32; 16];
        for (l, x) in lanes.iter_mut().zip(v) {
            *l = x.hsum();
        }
        Self::load(&lanes)
    }
    /// Maximum of lanes.
    fn hmax(self) -> f32;
    /// Lanes that hold integers in −128..=127, stored as bytes into `out[..16]`.
    #[inline(always)]
    fn to_i8(self, out: &mut [i8]) {
        let mut lanes = [0f32; 16];
        self.store(&mut lanes);
        for (o, v) in out[..16].iter_mut().zip(lanes) {
            *o = v as i8;
        }
    }
    /// Lanes from the low (`HIGH = false`) or high nibbles of 16 bytes, as unsigned integers.
    fn from_nibbles<const HIGH: bool>(q: &[u8]) -> Self;
    /// Lanes from 16 signed bytes.
    fn from_i8(q: &[u8]) -> Self;
    /// Lanes from 16 little-endian f16 values (32 bytes).
    fn from_f16(q: &[u8]) -> Self;
    /// Lanes from 16 little-endian bf16 values (32 bytes).
    fn from_bf16(q: &[u8]) -> Self;
    /// One little-endian f16 at `q[at..at + 2]`, widened exactly (hardware conversion where available).
    fn f16_scalar(q: &[u8], at: usize) -> f32;
    /// The f16 at `q[at..at + 2]` widened exactly and broadcast to every lane.
    #[inline(always)]
    fn splat_f16(q: &[u8], at: usize) -> Self {
        Self::splat(Self::f16_scalar(q, at))
    }
    /// The f16 values at `q[0..2]` and `q[2..4]`, each widened exactly and broadcast.
    #[inline(always)]
    fn splat_f16_pair(q: &[u8]) -> (Self, Self) {
        (Self::splat_f16(q, 0), Self::splat_f16(q, 2))
    }
    /// Lanes from the 2-bit field at bit `SHIFT` of 16 bytes, as unsigned integers.
    #[inline(always)]
    fn from_bits2<const SHIFT: u32>(q: &[u8]) -> Self {
        let mut lanes = [0f32; 16];
        for (l, &b) in lanes.iter_mut().zip(&q[..16]) {
            *l = ((b >> SHIFT) & 3) as f32;
        }
        Self::load(&lanes)
    }
    /// The unsigned six-bit values `q` (0..=63) of one half of a Q6_K super-block (128 weights)
    /// as eight vectors in weight order: `ql` its 64 low-nibble bytes, `qh` its 32 high-bit bytes.
    /// Vector `2·quarter + part` holds weights `32·quarter + 16·part ..` (q is
    /// `nibble | (2 bits << 4)`; quarters 0 and 2 share low bytes, 1 and 3 the next 32, and all
    /// four take their high bits from the same `qh` bytes at shifts 0, 2, 4, 6).
    #[inline(always)]
    fn q6_half(ql: &[u8], qh: &[u8]) -> [Self; 8] {
        let sixteen = Self::splat(16.0);
        let mut out = [Self::zero(); 8];
        for part in 0..2 {
            let (l, h) = (&ql[16 * part..], &qh[16 * part..]);
            let l2 = &ql[32 + 16 * part..];
            out[part] = Self::from_bits2::<0>(h).fma(sixteen, Self::from_nibbles::<false>(l));
            out[2 + part] = Self::from_bits2::<2>(h).fma(sixteen, Self::from_nibbles::<false>(l2));
            out[4 + part] = Self::from_bits2::<4>(h).fma(sixteen, Self::from_nibbles::<true>(l));
            out[6 + part] = Self::from_bits2::<6>(h).fma(sixteen, Self::from_nibbles::<true>(l2));
        }
        out
    }
    /// Both nibble halves of 16 bytes: (low nibbles, high nibbles), as `from_nibbles` gives them.
    #[inline(always)]
    fn nibbles(q: &[u8]) -> (Self, Self) {
        (Self::from_nibbles::<false>(q), Self::from_nibbles::<true>(q))
    }
    /// Weights of 16 bytes of nibbles, one FMA each: `fma(n, d_lo, m_lo)` for the low nibbles,
    /// `fma(n, d_hi, m_hi)` for the high ones (Q4_1: the same pair; Q4_K: two sub-blocks'). An
    /// instruction set may look the sixteen possible values up instead of converting each
    /// nibble (the same `fma` of the same values, so the same bits).
    #[inline(always)]
    fn nibbles_fma(q: &[u8], (d_lo, m_lo): (Self, Self), (d_hi, m_hi): (Self, Self)) -> (Self, Self) {
        let (lo, hi) = Self::nibbles(q);
        (lo.fma(d_lo, m_lo), hi.fma(d_hi, m_hi))
    }
    /// Q4_0's weights of 16 bytes of nibbles: `(n − 8) · d`, low nibbles then high (as
    /// `nibbles_fma`, possibly by a table of the sixteen values).
    #[inline(always)]
    fn nibbles_centered(q: &[u8], d: Self) -> (Self, Self) {
        let (lo, hi) = Self::nibbles(q);
        let eight = Self::splat(8.0);
        (lo.sub(eight).mul(d), hi.sub(eight).mul(d))
    }
}

/// e^x for every lane, accurate to about 2 ulp; lanes below -87.3 give the smallest normal.
#[inline(always)]
pub fn exp<S: F32x16>(x: S) -> S {
    let x = x.max(S::splat(-87.336_55)).min(S::splat(88.722_83));
    let n = x.mul(S::splat(std::f32::consts::LOG2_E)).round();
    let r = n.fma(S::splat(-0.693_359_4), x);
    let r = n.fma(S::splat(2.121_944_4e-4), r);
    let mut p = S::splat(1.987_569_1e-4);
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
        p = p.fma(r, S::splat(c));
    }
    let y = p.fma(r.mul(r), r).add(S::splat(1.0));
    y.mul(n.pow2i())
}

/// Generates a dispatcher `$name(isa, args..)` that runs `$kernel::<S>` compiled for each ISA.
macro_rules! simd_dispatch {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? => $kernel:ident) => {
        $(#[$meta])*
        $vis fn $name(isa: $crate::simd::Isa, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")]
            unsafe fn with_avx512($($arg: $ty),*) $(-> $ret)? {
                $kernel::<$crate::simd::avx512::Avx512>($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn with_avx2($($arg: $ty),*) $(-> $ret)? {
                $kernel::<$crate::simd::avx2::Avx2>($($arg),*)
            }
            match isa.kind() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: an `Isa` of kind Avx512 exists only once `Isa::cpu_has` saw these features.
                $crate::simd::IsaKind::Avx512 => unsafe { with_avx512($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: an `Isa` of kind Avx2 exists only once `Isa::cpu_has` saw these features.
                $crate::simd::IsaKind::Avx2 => unsafe { with_avx2($($arg),*) },
                _ => $kernel::<$crate::simd::scalar::Scalar>($($arg),*),
            }
        }
    };
}
pub(crate) use simd_dispatch;

#[cfg(test)]
mod tests {
    use super::scalar::Scalar;
    use super::*;

    simd_dispatch! {
        /// `[hsum16 of v, hsum of each v]` for sixteen vectors of sixteen lanes.
        fn both_sums(v: &[f32]) -> [[f32; 16]; 2] => both_sums_kernel
    }

    #[inline(always)]
    fn both_sums_kernel<S: F32x16>(v: &[f32]) -> [[f32; 16]; 2] {
        let mut vs = [S::zero(); 16];
        for (i, x) in vs.iter_mut().enumerate() {
            *x = S::load(&v[i * 16..]);
        }
        let (mut batched, mut single) = ([0f32; 16], [0f32; 16]);
        S::hsum16(&vs).store(&mut batched);
        for (s, x) in single.iter_mut().zip(&vs) {
            *s = x.hsum();
        }
        [batched, single]
    }

    #[test]
    fn hsum16_equals_sixteen_hsums_bit_for_bit() {
        let mut s = 12345u64;
        for _ in 0..200 {
            // Magnitudes over eight decades, so any change of pairing shows in the rounding.
            let v: Vec<f32> = (0..256)
                .map(|_| {
                    s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let u = (s >> 40) as f32 / (1u64 << 24) as f32;
                    (u - 0.5) * 10f32.powi((s >> 20) as i32 % 9 - 4)
                })
                .collect();
            let want: Vec<u32> = (0..16).map(|i| Scalar::load(&v[i * 16..]).hsum().to_bits()).collect();
            for isa in Isa::available() {
                let [batched, single] = both_sums(isa, &v);
                assert_eq!(batched.map(f32::to_bits).to_vec(), want, "{isa:?}: hsum16");
                assert_eq!(single.map(f32::to_bits).to_vec(), want, "{isa:?}: hsum");
            }
        }
    }
}
