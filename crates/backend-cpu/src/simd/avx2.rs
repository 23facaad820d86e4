//! `F32x16` as two AVX2 registers: lanes 0–7 in the first, 8–15 in the second.
//! Every method is only reachable from kernels instantiated inside `#[target_feature]` entry
//! points that `Isa::cpu_has` gated on avx2, fma and f16c (see `simd_dispatch!`); that is the
//! SAFETY argument for each intrinsic call below.

use super::F32x16;
use std::arch::x86_64::*;

#[derive(Clone, Copy, Debug)]
pub struct Avx2(pub(crate) __m256, pub(crate) __m256);

// Helpers are `#[inline(always)]` functions rather than closures: a closure is compiled without
// its caller's target features, so the intrinsics inside it would not inline.

#[inline(always)]
fn pow2i_half(v: __m256) -> __m256 {
    // SAFETY: see the module note.
    unsafe {
        let n = _mm256_add_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(127));
        _mm256_castsi256_ps(_mm256_slli_epi32::<23>(n))
    }
}

#[inline(always)]
fn nibbles_half<const HIGH: bool>(q: &[u8]) -> __m256 {
    assert!(q.len() >= 8);
    // SAFETY: 8 readable bytes checked above; see the module note.
    unsafe {
        let b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(q.as_ptr().cast()));
        let n = if HIGH { _mm256_srli_epi32::<4>(b) } else { _mm256_and_si256(b, _mm256_set1_epi32(0x0F)) };
        _mm256_cvtepi32_ps(n)
    }
}

/// Eight lanes of each quarter of a Q6_K half super-block, from byte `at` of its low-nibble and
/// high-bit bytes: low nibble | (two high bits << 4), as f32.
#[inline(always)]
fn q6_quarters(ql: &[u8], qh: &[u8], at: usize) -> [__m256; 4] {
    let (l, l2, h) = (widen8(&ql[at..]), widen8(&ql[32 + at..]), widen8(&qh[at..]));
    // SAFETY: see the module note.
    unsafe {
        let (nib, top) = (_mm256_set1_epi32(0x0F), _mm256_set1_epi32(0x30));
        // Not `.map` with a closure: a closure would not get the kernel's target features.
        [
            _mm256_cvtepi32_ps(_mm256_or_si256(
                _mm256_and_si256(l, nib),
                _mm256_and_si256(_mm256_slli_epi32::<4>(h), top),
            )),
            _mm256_cvtepi32_ps(_mm256_or_si256(
                _mm256_and_si256(l2, nib),
                _mm256_and_si256(_mm256_slli_epi32::<2>(h), top),
            )),
            _mm256_cvtepi32_ps(_mm256_or_si256(_mm256_srli_epi32::<4>(l), _mm256_and_si256(h, top))),
            _mm256_cvtepi32_ps(_mm256_or_si256(
                _mm256_srli_epi32::<4>(l2),
                _mm256_and_si256(_mm256_srli_epi32::<2>(h), top),
            )),
        ]
    }
}

/// Bytes `q[..8]` as eight u32 lanes.
#[inline(always)]
fn widen8(q: &[u8]) -> __m256i {
    assert!(q.len() >= 8);
    // SAFETY: 8 readable bytes checked above; see the module note.
    unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(q.as_ptr().cast())) }
}

#[inline(always)]
fn bits2_half<const SHIFT: u32>(q: &[u8]) -> __m256 {
    assert!(q.len() >= 8);
    // SAFETY: 8 readable bytes checked above; see the module note.
    unsafe {
        let b = widen8(q);
        let f = _mm256_and_si256(_mm256_srl_epi32(b, _mm_cvtsi32_si128(SHIFT as i32)), _mm256_set1_epi32(3));
        _mm256_cvtepi32_ps(f)
    }
}

#[inline(always)]
fn i8_half(q: &[u8]) -> __m256 {
    assert!(q.len() >= 8);
    // SAFETY: 8 readable bytes checked above; see the module note.
    unsafe { _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(q.as_ptr().cast()))) }
}

#[inline(always)]
fn f16_half(q: &[u8]) -> __m256 {
    assert!(q.len() >= 16);
    // SAFETY: 16 readable bytes checked above; see the module note.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(q.as_ptr().cast())) }
}

#[inline(always)]
fn bf16_half(q: &[u8]) -> __m256 {
    assert!(q.len() >= 16);
    // SAFETY: 16 readable bytes checked above; see the module note.
    unsafe {
        let w = _mm256_cvtepu16_epi32(_mm_loadu_si128(q.as_ptr().cast()));
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(w))
    }
}

macro_rules! lanewise {
    ($name:ident, $op:ident) => {
        #[inline(always)]
        fn $name(self, b: Self) -> Self {
            // SAFETY: see the module note.
            unsafe { Avx2($op(self.0, b.0), $op(self.1, b.1)) }
        }
    };
}

impl F32x16 for Avx2 {
    const ONE_REGISTER: bool = false;
    #[inline(always)]
    fn zero() -> Self {
        // SAFETY: see the module note.
        unsafe { Avx2(_mm256_setzero_ps(), _mm256_setzero_ps()) }
    }
    #[inline(always)]
    fn splat(x: f32) -> Self {
        // SAFETY: see the module note.
        unsafe { Avx2(_mm256_set1_ps(x), _mm256_set1_ps(x)) }
    }
    #[inline(always)]
    fn load(s: &[f32]) -> Self {
        assert!(s.len() >= 16);
        // SAFETY: 16 readable lanes checked above.
        unsafe { Avx2(_mm256_loadu_ps(s.as_ptr()), _mm256_loadu_ps(s.as_ptr().add(8))) }
    }
    #[inline(always)]
    fn store(self, s: &mut [f32]) {
        assert!(s.len() >= 16);
        // SAFETY: 16 writable lanes checked above.
        unsafe {
            _mm256_storeu_ps(s.as_mut_ptr(), self.0);
            _mm256_storeu_ps(s.as_mut_ptr().add(8), self.1);
        }
    }
    lanewise!(add, _mm256_add_ps);
    lanewise!(sub, _mm256_sub_ps);
    lanewise!(mul, _mm256_mul_ps);
    lanewise!(div, _mm256_div_ps);
    lanewise!(max, _mm256_max_ps);
    lanewise!(min, _mm256_min_ps);
    #[inline(always)]
    fn fma(self, b: Self, c: Self) -> Self {
        // SAFETY: see the module note.
        unsafe { Avx2(_mm256_fmadd_ps(self.0, b.0, c.0), _mm256_fmadd_ps(self.1, b.1, c.1)) }
    }
    #[inline(always)]
    fn round(self) -> Self {
        const MODE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        // SAFETY: see the module note.
        unsafe { Avx2(_mm256_round_ps::<MODE>(self.0), _mm256_round_ps::<MODE>(self.1)) }
    }
    #[inline(always)]
    fn pow2i(self) -> Self {
        Avx2(pow2i_half(self.0), pow2i_half(self.1))
    }
    #[inline(always)]
    fn hsum(self) -> f32 {
        // SAFETY: see the module note.
        unsafe {
            let b = _mm256_add_ps(self.0, self.1);
            let c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps::<1>(b));
            let d = _mm_add_ps(c, _mm_movehl_ps(c, c));
            _mm_cvtss_f32(_mm_add_ss(d, _mm_shuffle_ps::<0b01>(d, d)))
        }
    }
    #[inline(always)]
    fn hmax(self) -> f32 {
        let mut lanes = [0f32; 16];
        self.store(&mut lanes);
        lanes.into_iter().fold(f32::NEG_INFINITY, f32::max)
    }
    #[inline(always)]
    fn from_nibbles<const HIGH: bool>(q: &[u8]) -> Self {
        assert!(q.len() >= 16);
        Avx2(nibbles_half::<HIGH>(&q[..8]), nibbles_half::<HIGH>(&q[8..16]))
    }
    #[inline(always)]
    fn from_i8(q: &[u8]) -> Self {
        assert!(q.len() >= 16);
        Avx2(i8_half(&q[..8]), i8_half(&q[8..16]))
    }
    /// As the default (the same exact integers), built in integer lanes: one conversion a vector
    /// instead of two and an FMA (`avx512.rs` does the same).
    #[inline(always)]
    fn q6_half(ql: &[u8], qh: &[u8]) -> [Self; 8] {
        assert!(ql.len() >= 64 && qh.len() >= 32);
        let mut out = [Self::zero(); 8];
        for part in 0..2 {
            let (lo, hi) = (q6_quarters(ql, qh, 16 * part), q6_quarters(ql, qh, 16 * part + 8));
            for (quarter, (l, h)) in lo.into_iter().zip(hi).enumerate() {
                out[2 * quarter + part] = Avx2(l, h);
            }
        }
        out
    }
    /// As the default (exact small integers), without its per-lane scalar loop.
    #[inline(always)]
    fn from_bits2<const SHIFT: u32>(q: &[u8]) -> Self {
        assert!(q.len() >= 16);
        Avx2(bits2_half::<SHIFT>(&q[..8]), bits2_half::<SHIFT>(&q[8..16]))
    }
    #[inline(always)]
    fn from_f16(q: &[u8]) -> Self {
        assert!(q.len() >= 32);
        Avx2(f16_half(&q[..16]), f16_half(&q[16..32]))
    }
    #[inline(always)]
    fn from_bf16(q: &[u8]) -> Self {
        assert!(q.len() >= 32);
        Avx2(bf16_half(&q[..16]), bf16_half(&q[16..32]))
    }
    #[inline(always)]
    fn f16_scalar(q: &[u8], at: usize) -> f32 {
        let bits = u16::from_le_bytes([q[at], q[at + 1]]);
        // SAFETY: see the module note (f16c is part of the gate).
        unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32))) }
    }
    #[inline(always)]
    fn splat_f16(q: &[u8], at: usize) -> Self {
        let bits = u16::from_le_bytes([q[at], q[at + 1]]);
        // SAFETY: see the module note.
        unsafe {
            let v = _mm256_cvtph_ps(_mm_set1_epi16(bits as i16));
            Avx2(v, v)
        }
    }
}
