// The fold of a split K's chunk partials for linear_tma.cu (and the kernels that fold them after
// it): `fold_column`, the left fold of one output element's partials in chunk order, and the
// `fold_chunks` / `fold_chunks_glu` launches for splits of more rows than a launch's last blocks
// fold. Split from linear_tma.cu by meaning; included just before it (compile.rs).

// The left fold (((0 + p[0]) + p[s]) + p[2s]) + … of `num_chunks` partials `s` apart, the fold of
// a split K's chunk partials. The loads go out FOLD_BATCH at a time with the next batch's issued
// before this batch's adds, so the chain of adds waits on memory about once, not once a load (a
// split's last block folds a feature tile alone: this wait was its tail).
#define FOLD_BATCH 16
__device__ __forceinline__ float fold_column(const float* p, u64 s, int num_chunks) {
    float cur[FOLD_BATCH], nxt[FOLD_BATCH];
#pragma unroll
    for (int u = 0; u < FOLD_BATCH; u++) cur[u] = u < num_chunks ? __ldcg(p + (u64)u * s) : 0.0f;
    float v = 0.0f;
    for (int c0 = 0; c0 < num_chunks; c0 += FOLD_BATCH) {
#pragma unroll
        for (int u = 0; u < FOLD_BATCH; u++) {
            const int c = c0 + FOLD_BATCH + u;
            nxt[u] = c < num_chunks ? __ldcg(p + (u64)c * s) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < FOLD_BATCH; u++)
            if (c0 + u < num_chunks) v = __fadd_rn(v, cur[u]);
#pragma unroll
        for (int u = 0; u < FOLD_BATCH; u++) cur[u] = nxt[u];
    }
    return v;
}

// `fold_chunks` of a GLU launch's partials ([chunk][row][gate's n0 features, then up's]): the
// fold of element (n, m) of gate and of up, and their SwiGLU (`silu_times`) into out (n0 wide),
// with `xb` also its rounded k-permuted copy, as silu_mul_bf16 writes it.
__device__ __forceinline__ void glu_fold_store(const float* __restrict__ part, float* out,
                                               unsigned short* __restrict__ xb, int num_rows, int n0, int num_chunks,
                                               int n, int m) {
    const u64 n_all = 2 * (u64)n0;
    const float* p = part + (u64)n * n_all + m;
    const float y = silu_times(fold_column(p, (u64)num_rows * n_all, num_chunks),
                               fold_column(p + n0, (u64)num_rows * n_all, num_chunks));
    out[(u64)n * n0 + m] = y;
    if (xb) xb[(u64)n * n0 + kperm(m)] = (unsigned short)bf16_bits(y);
}

// The fold of a split K's chunk partials ([chunk][row][feature], the features of up to three
// weights end to end as `linear_tma` writes them) in ascending chunk order, one thread per
// output element: the left fold the unsplit kernels keep in registers (added into the output with
// `resid`, as `linear_tma` does).
extern "C" __global__ void fold_chunks(const float* __restrict__ part, float* out0, float* out1, float* out2,
                                       int num_rows, int n0, int n1, int n2, int num_chunks, int resid) { TL_BLOCK();
    PDL_ENTRY();
    const u64 n_all = (u64)(n0 + n1 + n2), i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (u64)num_rows * n_all) return;
    const int row = (int)(i / n_all);
    const Seg sg = seg_of((int)(i % n_all), 1, n0, n1);
    store_out(pick3(sg.s, out0, out1, out2) + (u64)row * pick3(sg.s, n0, n1, n2) + sg.u,
              fold_column(part + i, (u64)num_rows * n_all, num_chunks), resid);
}

// A split GLU launch's fold of more rows than its last blocks fold: one thread per element.
extern "C" __global__ void fold_chunks_glu(const float* __restrict__ part, float* out,
                                           unsigned short* __restrict__ xb, int num_rows, int n0, int num_chunks) { TL_BLOCK();
    PDL_ENTRY();
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (u64)num_rows * n0) return;
    glu_fold_store(part, out, xb, num_rows, n0, num_chunks, (int)(i / n0), (int)(i % n0));
}
