// The instances of linear_tma.cu's template, one kernel each: the row tiles, feature tiles,
// fold chunks, clusters and GLU modes the host picks among (tma.rs names them; kernel_set.rs lists
// them). Split from linear_tma.cu by meaning; included just after it (compile.rs).

// One kernel per row tile N, feature tile FT and fold chunk (SPC stages: 256 of K, or 1,024 for
// the `_k1024` instances); the chunk's stages are unrolled (a loop over them spilled the
// accumulators of the 64-row instance at its 96 registers).
#define LINEAR_TMA(N, FT, SPC, NAME, BLOCKS) LINEAR_TMA_G(N, FT, SPC, 1, GLU_NONE, false, NAME, BLOCKS)
#define LINEAR_TMA_CL(N, FT, SPC, CL, NAME, BLOCKS) LINEAR_TMA_G(N, FT, SPC, CL, GLU_NONE, false, NAME, BLOCKS)
#define LINEAR_TMA_G(N, FT, SPC, CL, GLU, NRM, NAME, BLOCKS) LINEAR_TMA_GK(N, FT, SPC, CL, 1, GLU, NRM, NAME, BLOCKS)
#define LINEAR_TMA_GK(N, FT, SPC, CL, KS, GLU, NRM, NAME, BLOCKS)                                                        \
    extern "C" __global__ void __launch_bounds__(tma_threads(N), BLOCKS) linear_tma_bf16_##NAME(                    \
        const __grid_constant__ TmaMap xmap, const __grid_constant__ TmaMap wmap0,                                   \
        const __grid_constant__ TmaMap wmap1, const __grid_constant__ TmaMap wmap2, float* out0, float* out1,        \
        float* out2, int num_rows, int n0, int n1, int n2, int k_in, int chunks_per_split, float* __restrict__ part, \
        u32* __restrict__ counters, int resid, unsigned short* __restrict__ xb, const float* __restrict__ nx,         \
        const float* __restrict__ nw, float eps) { TL_BLOCK();                                                       \
        PDL_LAUNCH(); /* linear_tma waits (PDL_WAIT) once its first weight tiles are asked for */                  \
        linear_tma<N, FT, SPC, CL, KS, GLU, NRM>(xmap, wmap0, wmap1, wmap2, out0, out1, out2, num_rows, n0, n1, n2,      \
                                             k_in, chunks_per_split, part, counters, resid, xb, nx, nw, eps);      \
    }
#define LINEAR_TMA_KC(N, FT, NAME, BLOCKS) \
    LINEAR_TMA(N, FT, 4, NAME, BLOCKS)     \
    LINEAR_TMA(N, FT, 16, NAME##_k1024, BLOCKS)
// gate|up with the SwiGLU (`GLU`): 128 features a task, one CTA a cluster; up to 64 rows with
// warpgroup 1's up sums exchanged (`_glu`), 128 and 192 rows interleaved (`_gli`; session 22's
// exchange at 2,048 rows cost more than the silu_mul launch it saved).
#define LINEAR_TMA_GLU(N, NAME, BLOCKS)                                 \
    LINEAR_TMA_G(N, 128, 4, 1, GLU_EXCHANGE, false, NAME##_glu, BLOCKS) \
    LINEAR_TMA_G(N, 128, 16, 1, GLU_EXCHANGE, false, NAME##_glu_k1024, BLOCKS)
#define LINEAR_TMA_GLI(N, NAME, BLOCKS)                                    \
    LINEAR_TMA_G(N, 128, 4, 1, GLU_IL, false, NAME##_gli, BLOCKS)          \
    LINEAR_TMA_G(N, 128, 16, 1, GLU_IL, false, NAME##_gli_k1024, BLOCKS)   \
    LINEAR_TMA_G(N, 128, 4, 2, GLU_IL, false, NAME##_gli_c2, BLOCKS)       \
    LINEAR_TMA_G(N, 128, 16, 2, GLU_IL, false, NAME##_gli_c2_k1024, BLOCKS)

// The norm inside (`_norm`, NRM), of the products alone and of gate|up with the SwiGLU: decode rows.
#define LINEAR_TMA_NORM(N, NAME, BLOCKS)                                  \
    LINEAR_TMA_G(N, 128, 4, 1, GLU_NONE, true, NAME##_norm, BLOCKS)             \
    LINEAR_TMA_G(N, 128, 16, 1, GLU_NONE, true, NAME##_norm_k1024, BLOCKS)      \
    LINEAR_TMA_G(N, 128, 4, 1, GLU_EXCHANGE, true, NAME##_glu_norm, BLOCKS)     \
    LINEAR_TMA_G(N, 128, 16, 1, GLU_EXCHANGE, true, NAME##_glu_norm_k1024, BLOCKS)
LINEAR_TMA_KC(8, 128, n8, 2)
LINEAR_TMA_KC(16, 128, n16, 2)
LINEAR_TMA_KC(32, 128, n32, 2)
LINEAR_TMA_KC(64, 128, n64, 2)
LINEAR_TMA_KC(128, 128, n128, 1)
LINEAR_TMA_KC(192, 128, n192, 1)
LINEAR_TMA_KC(16, 64, n16_f64, 2)
LINEAR_TMA_KC(32, 64, n32_f64, 2)
LINEAR_TMA_KC(64, 64, n64_f64, 2)
// Rows of x shared by a cluster of two (`CL`): whole-K tasks of 128 features at 33-64 rows
// (`PLUMB_CUDA_TMA_CLUSTER`) and at prefill rows (`PLUMB_CUDA_TMA_CLUSTER_PREFILL`).
LINEAR_TMA_CL(64, 128, 4, 2, n64_c2, 2)
LINEAR_TMA_CL(64, 128, 16, 2, n64_c2_k1024, 2)
LINEAR_TMA_CL(128, 128, 4, 2, n128_c2, 1)
LINEAR_TMA_CL(128, 128, 16, 2, n128_c2_k1024, 1)
LINEAR_TMA_CL(192, 128, 4, 2, n192_c2, 1)
LINEAR_TMA_CL(192, 128, 16, 2, n192_c2_k1024, 1)
LINEAR_TMA_GLU(8, n8, 2)
LINEAR_TMA_GLU(16, n16, 2)
LINEAR_TMA_GLU(32, n32, 2)
LINEAR_TMA_GLU(64, n64, 2)
LINEAR_TMA_GLI(128, n128, 1)
LINEAR_TMA_GLI(192, n192, 1)
LINEAR_TMA_NORM(8, n8, 2)
// K split over clusters of two or four CTAs, folded in rank 0 (`ks_fold_chunk`; `PLUMB_CUDA_TMA_KSPLIT`):
// decode rows, the plain products and gate|up with the SwiGLU.
#define LINEAR_TMA_KS(N, KS, NAME, BLOCKS)                                                 \
    LINEAR_TMA_GK(N, 128, 4, 1, KS, GLU_NONE, false, NAME##_s##KS, BLOCKS)                 \
    LINEAR_TMA_GK(N, 128, 16, 1, KS, GLU_NONE, false, NAME##_s##KS##_k1024, BLOCKS)        \
    LINEAR_TMA_GK(N, 128, 4, 1, KS, GLU_EXCHANGE, false, NAME##_glu_s##KS, BLOCKS)         \
    LINEAR_TMA_GK(N, 128, 16, 1, KS, GLU_EXCHANGE, false, NAME##_glu_s##KS##_k1024, BLOCKS)
LINEAR_TMA_KS(8, 2, n8, 2)
LINEAR_TMA_KS(8, 4, n8, 2)
LINEAR_TMA_KS(16, 2, n16, 2)
LINEAR_TMA_KS(16, 4, n16, 2)
LINEAR_TMA_KS(32, 2, n32, 2)
LINEAR_TMA_KS(32, 4, n32, 2)
LINEAR_TMA_KS(64, 2, n64, 2)
LINEAR_TMA_KS(64, 4, n64, 1)
// The same on 64-feature tasks, plain products of 32 and 64 rows (`PLUMB_CUDA_TMA_KSPLIT_NARROW`):
// where 128-feature whole-K tasks leave SMs idle (o at 64 rows: 32 tasks on 132 SMs, 64 on
// 64-feature ones) or a split folds its partials through global memory in a launch (down).
#define LINEAR_TMA_KS_NARROW(N, KS, NAME, BLOCKS)                             \
    LINEAR_TMA_GK(N, 64, 4, 1, KS, GLU_NONE, false, NAME##_f64_s##KS, BLOCKS) \
    LINEAR_TMA_GK(N, 64, 16, 1, KS, GLU_NONE, false, NAME##_f64_s##KS##_k1024, BLOCKS)
LINEAR_TMA_KS_NARROW(32, 2, n32, 2)
LINEAR_TMA_KS_NARROW(32, 4, n32, 2)
LINEAR_TMA_KS_NARROW(64, 2, n64, 2)
LINEAR_TMA_KS_NARROW(64, 4, n64, 2)
