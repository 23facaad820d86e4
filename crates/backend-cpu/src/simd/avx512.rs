//! `F32x16` on one AVX-512 register.
//! Every method is only reachable from kernels instantiated inside `#[target_feature]` entry
//! points that `Isa::cpu_has` gated on avx512f/bw/dq/vl, f16c and fma (see `simd_dispatch!`);
//! that is the SAFETY argument for each intrinsic call below.

use super::F32x16;
use std::arch::x86_64::*;

#[derive(Clone, Copy, Debug)]
pub struct Avx512(pub(crate) __m512);

/// The four f16 values at `q[0..8]`, widened exactly.
#[inline(always)]
fn f16x4(q: &[u8]) -> __m128 {
    assert!(q.len() >= 8);
    // SAFETY: 8 readable bytes checked above; see the module note.
    unsafe { _mm_cvtph_ps(_mm_loadl_epi64(q.as_ptr().cast())) }
}

/// The 16 bytes at `q[0..16]` zero-extended to 32-bit lanes.
#[inline(always)]
fn widen(q: &[u8]) -> __m512i {
    assert!(q.len() >= 16);
    // SAFETY: 16 readable bytes checked above; see the module note.
    unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(q.as_ptr().cast())) }
}

/// Lanes 0, 1, …, 15 as f32.
#[inline(always)]
fn iota() -> __m512 {
    // SAFETY: see the module note.
    unsafe { _mm512_setr_ps(0., 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15.) }
}

/// (lo[q & 15], hi[q >> 4]) lane by lane for the 16 bytes at `q[0..16]`.
#[inline(always)]
fn lookup_nibbles(lo: __m512, hi: __m512, q: &[u8]) -> (Avx512, Avx512) {
    let b = widen(q);
    // SAFETY: see the module note. `permutexvar` reads the low four bits of each index lane, so
    // the low nibble needs no mask.
    unsafe { (Avx512(_mm512_permutexvar_ps(b, lo)), Avx512(_mm512_permutexvar_ps(_mm512_srli_epi32::<4>(b), hi))) }
}

/// Lane `L` of `v` in all sixteen lanes.
#[inline(always)]
fn broadcast_lane<const L: i32>(v: __m128) -> __m512 {
    // SAFETY: see the module note.
    unsafe {
        if L == 0 {
            _mm512_broadcastss_ps(v)
        } else {
            _mm512_permutexvar_ps(_mm512_set1_epi32(L), _mm512_castps128_ps512(v))
        }
    }
}

impl F32x16 for Avx512 {
    const ONE_REGISTER: bool = true;
    #[inline(always)]
    fn zero() -> Self {
        // SAFETY: see the module note.
        Avx512(unsafe { _mm512_setzero_ps() })
    }
    #[inline(always)]
    fn splat(x: f32) -> Self {
        // SAFETY: see the module note.
        Avx512(unsafe { _mm512_set1_ps(x) })
    }
    #[inline(always)]
    fn load(s: &[f32]) -> Self {
        assert!(s.len() >= 16);
        // SAFETY: 16 readable lanes checked above; unaligned load.
        Avx512(unsafe { _mm512_loadu_ps(s.as_ptr()) })
    }
    #[inline(always)]
    fn store(self, s: &mut [f32]) {
        assert!(s.len() >= 16);
        // SAFETY: 16 writable lanes checked above; unaligned store.
        unsafe { _mm512_storeu_ps(s.as_mut_ptr(), self.0) }
    }
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        // SAFETY: see the module note.
        Avx512(unsafe { _mm512_add_ps(self.0, b.0) })
    }
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        // SAFETY: see the module note.
        Avx512(unsafe { _mm512_sub_ps(self.0, b.0) })
    }
    #[inline(always)]
    fn mul(self, b: Self) -> Self {
        // SAFETY: see the module note.
        Avx512(unsafe { _mm512_mul_ps(self.0, b.0) })
    }
    #[inline(always)]
    fn div(self, b: Self) -> Self {
        // SAFETY: see the module note.
        Avx512(unsafe { _mm512_div_ps(self.0, b.0) })
    }
    #[inline(always)]
    fn fma(self, b: Self, c: Self) -> Self {
        // SAFETY: see the module note.
        Avx512(unsafe { _mm512_fmadd_ps(self.0, b.0, c.0) })
    }
    #[inline(always)]
    fn max(self, b: Self) -> Self {
        // SAFETY: see the module note.
        Avx512(unsafe { _mm512_max_ps(self.0, b.0) })
    }
    #[inline(always)]
    fn min(self, b: Self) -> Self {
        // SAFETY: see the module note.
        Avx512(unsafe { _mm512_min_ps(self.0, b.0) })
    }
    #[inline(always)]
    fn round(self) -> Self {
        // SAFETY: see the module note.
        Avx512(unsafe { _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(self.0) })
    }
    #[inline(always)]
    fn pow2i(self) -> Self {
        // SAFETY: see the module note.
        unsafe {
            let n = _mm512_cvtps_epi32(self.0);
            Avx512(_mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(n, _mm512_set1_epi32(127)))))
        }
    }
    #[inline(always)]
    fn hsum(self) -> f32 {
        // SAFETY: see the module note.
        unsafe {
            let lo = _mm512_castps512_ps256(self.0);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(self.0)));
            let b = _mm256_add_ps(lo, hi);
            let c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps::<1>(b));
            let d = _mm_add_ps(c, _mm_movehl_ps(c, c));
            _mm_cvtss_f32(_mm_add_ss(d, _mm_shuffle_ps::<0b01>(d, d)))
        }
    }
    #[inline(always)]
    fn hsum16(v: &[Self; 16]) -> Self {
        // The `hsum` tree on sixteen vectors at once: each level adds the same lane pairs as
        // `hsum` (first operand first), packing two vectors' partial sums into one register.
        // Loops, not `array::from_fn`: a closure would not get this function's target features.
        // SAFETY: see the module note.
        unsafe {
            // b[i] = a[i] + a[i + 8]: vectors 2m and 2m + 1 share register m (halves).
            let mut l1 = [_mm512_setzero_ps(); 8];
            for (m, r) in l1.iter_mut().enumerate() {
                let (a, b) = (v[2 * m].0, v[2 * m + 1].0);
                *r = _mm512_add_ps(
                    _mm512_shuffle_f32x4::<0b01_00_01_00>(a, b),
                    _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b),
                );
            }
            // c[i] = b[i] + b[i + 4]: vector 4n + j in 128-bit lane j of register n.
            let mut l2 = [_mm512_setzero_ps(); 4];
            for (n, r) in l2.iter_mut().enumerate() {
                let (p, q) = (l1[2 * n], l1[2 * n + 1]);
                *r = _mm512_add_ps(
                    _mm512_shuffle_f32x4::<0b10_00_10_00>(p, q),
                    _mm512_shuffle_f32x4::<0b11_01_11_01>(p, q),
                );
            }
            // d[i] = c[i] + c[i + 2]: lane j of register p holds vectors 8p + j and 8p + 4 + j.
            let mut l3 = [_mm512_setzero_ps(); 2];
            for (p, r) in l3.iter_mut().enumerate() {
                let (y, z) = (l2[2 * p], l2[2 * p + 1]);
                *r = _mm512_add_ps(_mm512_shuffle_ps::<0b01_00_01_00>(y, z), _mm512_shuffle_ps::<0b11_10_11_10>(y, z));
            }
            // d[0] + d[1]: element e of 128-bit lane j is vector 4e + j; then back in order.
            let (u, w) = (l3[0], l3[1]);
            let e = _mm512_add_ps(_mm512_shuffle_ps::<0b10_00_10_00>(u, w), _mm512_shuffle_ps::<0b11_01_11_01>(u, w));
            let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
            Avx512(_mm512_permutexvar_ps(order, e))
        }
    }
    #[inline(always)]
    fn hmax(self) -> f32 {
        // SAFETY: see the module note.
        unsafe { _mm512_reduce_max_ps(self.0) }
    }
    #[inline(always)]
    fn to_i8(self, out: &mut [i8]) {
        assert!(out.len() >= 16);
        // SAFETY: 16 writable bytes checked above; integral lanes in range convert exactly.
        unsafe {
            let bytes = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(self.0));
            _mm_storeu_si128(out.as_mut_ptr().cast(), bytes)
        }
    }
    #[inline(always)]
    fn from_nibbles<const HIGH: bool>(q: &[u8]) -> Self {
        assert!(q.len() >= 16);
        // SAFETY: 16 readable bytes checked above.
        unsafe {
            let b = _mm512_cvtepu8_epi32(_mm_loadu_si128(q.as_ptr().cast()));
            let n = if HIGH { _mm512_srli_epi32::<4>(b) } else { _mm512_and_si512(b, _mm512_set1_epi32(0x0F)) };
            Avx512(_mm512_cvtepi32_ps(n))
        }
    }
    #[inline(always)]
    fn from_i8(q: &[u8]) -> Self {
        assert!(q.len() >= 16);
        // SAFETY: 16 readable bytes checked above.
        unsafe { Avx512(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q.as_ptr().cast())))) }
    }
    #[inline(always)]
    fn from_f16(q: &[u8]) -> Self {
        assert!(q.len() >= 32);
        // SAFETY: 32 readable bytes checked above.
        unsafe { Avx512(_mm512_cvtph_ps(_mm256_loadu_si256(q.as_ptr().cast()))) }
    }
    #[inline(always)]
    fn from_bf16(q: &[u8]) -> Self {
        assert!(q.len() >= 32);
        // SAFETY: 32 readable bytes checked above.
        unsafe {
            let w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(q.as_ptr().cast()));
            Avx512(_mm512_castsi512_ps(_mm512_slli_epi32::<16>(w)))
        }
    }
    #[inline(always)]
    fn f16_scalar(q: &[u8], at: usize) -> f32 {
        let bits = u16::from_le_bytes([q[at], q[at + 1]]);
        // SAFETY: see the module note (f16c is part of the gate).
        unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32))) }
    }
    #[inline(always)]
    fn splat_f16(q: &[u8], at: usize) -> Self {
        if q.len() >= at + 8 {
            // Converting four halves and broadcasting one lane costs two vector uops where
            // broadcasting the half first and converting sixteen costs three; the value is exact
            // either way.
            return Avx512(broadcast_lane::<0>(f16x4(&q[at..])));
        }
        let bits = u16::from_le_bytes([q[at], q[at + 1]]);
        // SAFETY: see the module note.
        unsafe { Avx512(_mm512_cvtph_ps(_mm256_set1_epi16(bits as i16))) }
    }
    #[inline(always)]
    fn splat_f16_pair(q: &[u8]) -> (Self, Self) {
        if q.len() < 8 {
            return (Self::splat_f16(q, 0), Self::splat_f16(q, 2));
        }
        let v = f16x4(q);
        (Avx512(broadcast_lane::<0>(v)), Avx512(broadcast_lane::<1>(v)))
    }
    #[inline(always)]
    fn nibbles_fma(q: &[u8], (d_lo, m_lo): (Self, Self), (d_hi, m_hi): (Self, Self)) -> (Self, Self) {
        // Lane n of a table is fma(n, d, m): each weight is one lookup (a permute takes the low
        // four bits of its index lane) instead of a mask, a conversion and an FMA.
        let (t_lo, t_hi) = (Avx512(iota()).fma(d_lo, m_lo).0, Avx512(iota()).fma(d_hi, m_hi).0);
        lookup_nibbles(t_lo, t_hi, q)
    }
    #[inline(always)]
    fn nibbles_centered(q: &[u8], d: Self) -> (Self, Self) {
        // SAFETY: see the module note.
        let table = unsafe { _mm512_sub_ps(iota(), _mm512_set1_ps(8.0)) };
        let table = Avx512(table).mul(d).0;
        lookup_nibbles(table, table, q)
    }
    #[inline(always)]
    fn nibbles(q: &[u8]) -> (Self, Self) {
        assert!(q.len() >= 16);
        // SAFETY: 16 readable bytes checked above; see the module note.
        unsafe {
            let b = _mm512_cvtepu8_epi32(_mm_loadu_si128(q.as_ptr().cast()));
            let lo = _mm512_and_si512(b, _mm512_set1_epi32(0x0F));
            let hi = _mm512_srli_epi32::<4>(b);
            (Avx512(_mm512_cvtepi32_ps(lo)), Avx512(_mm512_cvtepi32_ps(hi)))
        }
    }
    #[inline(always)]
    fn q6_half(ql: &[u8], qh: &[u8]) -> [Self; 8] {
        assert!(ql.len() >= 64 && qh.len() >= 32);
        // Six byte expansions for eight vectors (each low byte feeds two quarters, each high byte
        // four), and q built in integers: one conversion per vector.
        // SAFETY: 64 and 32 readable bytes checked above; see the module note.
        unsafe {
            let (nib, top) = (_mm512_set1_epi32(0x0F), _mm512_set1_epi32(0x30));
            let mut out = [Avx512(_mm512_setzero_ps()); 8];
            for part in 0..2 {
                let (l, l2, h) = (widen(&ql[16 * part..]), widen(&ql[32 + 16 * part..]), widen(&qh[16 * part..]));
                // value = low | (h bits at 4..6): ternlog 0xF8 is a | (b & c).
                let v = [
                    _mm512_ternarylogic_epi32::<0xF8>(_mm512_and_si512(l, nib), _mm512_slli_epi32::<4>(h), top),
                    _mm512_ternarylogic_epi32::<0xF8>(_mm512_and_si512(l2, nib), _mm512_slli_epi32::<2>(h), top),
                    _mm512_ternarylogic_epi32::<0xF8>(_mm512_srli_epi32::<4>(l), h, top),
                    _mm512_ternarylogic_epi32::<0xF8>(_mm512_srli_epi32::<4>(l2), _mm512_srli_epi32::<2>(h), top),
                ];
                for (quarter, v) in v.into_iter().enumerate() {
                    out[2 * quarter + part] = Avx512(_mm512_cvtepi32_ps(v));
                }
            }
            out
        }
    }
    #[inline(always)]
    fn from_bits2<const SHIFT: u32>(q: &[u8]) -> Self {
        assert!(q.len() >= 16);
        // SAFETY: 16 readable bytes checked above; see the module note.
        unsafe {
            let b = _mm512_cvtepu8_epi32(_mm_loadu_si128(q.as_ptr().cast()));
            let f = _mm512_and_si512(_mm512_srl_epi32(b, _mm_cvtsi32_si128(SHIFT as i32)), _mm512_set1_epi32(3));
            Avx512(_mm512_cvtepi32_ps(f))
        }
    }
}
