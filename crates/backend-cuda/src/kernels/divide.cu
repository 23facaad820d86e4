// Division by one divisor many times over, with __fdiv_rn's bits (the attention epilogues'
// out = total / l). Self-contained: tests/division.rs compiles this file alone with its probe.

// a / b for many a over one b, each bit for bit as __fdiv_rn(a, b) gives it. NVRTC compiles
// __fdiv_rn to div.rn's fast path (MUFU.RCP of b, one FFMA refinement of that reciprocal, the
// quotient a · y and one FFMA correction of it) guarded by FCHK, which branches to a slow
// subroutine where the operands' exponents or specials need it: a BSSY region around every
// quotient, so an epilogue's 16 to 32 divisions a thread ran one after another. Here the
// reciprocal is refined once per divisor, `div_fast` is the same fast path's instructions, and the
// guard is one range check for the lot (`div_fast_ok`: operands in [2^-60, 2^60], so no quotient,
// residual leaves the normal range; 0, inf and NaN fail it), under which the caller
// takes every quotient the fast way, else every one by __fdiv_rn (the checks combined with `&`,
// not `&&`, so they are not a chain of branches). The same bits either way:
// within that range the fast path is what div.rn returns (tests/division.rs checks it on a GPU).
struct DivBy {
    float b, y;
};
__device__ __forceinline__ DivBy div_by(float b) {
    float y0;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y0) : "f"(b));
    return {b, __fmaf_rn(y0, __fmaf_rn(-b, y0, 1.0f), y0)};
}
__device__ __forceinline__ bool div_fast_ok(float x) {
    const float a = fabsf(x);
    return a >= 0x1p-60f && a <= 0x1p60f;
}
__device__ __forceinline__ float div_fast(float a, DivBy d) {
    const float q = __fmul_rn(a, d.y);
    return __fmaf_rn(d.y, __fmaf_rn(-d.b, q, a), q);
}
