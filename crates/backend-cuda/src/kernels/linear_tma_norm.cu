// The norm inside the TMA products of decode rows (linear_tma.cu's `_norm` instances, NRM): the
// inverse rms of the task's rows and the activation tiles its consumers write from x. Uses
// linear.cu's norm_inv_of and LIN_NORM_THREADS, linear_wgmma.cu's WG_KS and kv_store.cu's bf16_bits.

// The norm inside a launch (NRM, the `_norm` instances: `ops_tma`'s rms_norm(x) with the norm
// weight `nw` in the products of decode rows): where the other instances take rms_norm's rounded
// output by TMA, the consumers write the activation tile of a stage themselves from x, the
// values rms_norm's rounded copy holds, so the products' bits are those of the norm then the
// products (`tests/fused.rs`), with no norm launch before. Loads of a row a thread issues at once.
#define TMA_NORM_BATCH 16

// 1 / sqrt(mean of squares + eps) of rows r0 .. r0 + nr - 1 of x into inv[], by the 256 consumer
// threads (named barrier 1) with rms_norm's arithmetic (elementwise.cu's rms_norm_one and
// norm_inv): thread t sums the squares of columns t, t + 256, ... in one fmaf chain, warps reduce
// by the xor butterfly, and the eight warp sums fold left in warp order (`norm_inv_of`).
template <int N>
__device__ __forceinline__ void tma_norm_inv(const float* __restrict__ x, int r0, int nr, int cols, float eps,
                                             float* inv) {
    __shared__ float sums[N][LIN_NORM_THREADS / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int n = 0; n < nr; n++) {
        const float* xr = x + (u64)(r0 + n) * cols;
        float s = 0.0f;
        for (int j0 = threadIdx.x; j0 < cols; j0 += TMA_NORM_BATCH * LIN_NORM_THREADS) {
            float v[TMA_NORM_BATCH];
#pragma unroll
            for (int u = 0; u < TMA_NORM_BATCH; u++) {
                const int j = j0 + u * LIN_NORM_THREADS;
                v[u] = j < cols ? xr[j] : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < TMA_NORM_BATCH; u++)
                if (j0 + u * LIN_NORM_THREADS < cols) s = fmaf(v[u], v[u], s);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
        if (lane == 0) sums[n][warp] = s;
    }
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
    if ((int)threadIdx.x < nr) inv[threadIdx.x] = norm_inv_of(sums[threadIdx.x], cols, eps);
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
}

// The consumers' share of a stage's activation tile (N rows of 64 of K: N / 8 words a thread),
// loaded a stage ahead (`tma_norm_load`) so that writing it (`tma_norm_write`) waits on no memory.
// Thread i takes word i % 32 of row i / 32 (then i + 256, ...). Stored word w of a group of 16
// holds logical word 4 (w % 4) + w / 4 (`kperm`).
template <int N> struct NormShare {
    float2 v[N / 8], g[N / 8];
};
__device__ __forceinline__ int norm_share_k(int idx, int s) {
    const int w = idx % 32, ws = w % 16;
    return s * WG_KS + (w / 16) * 32 + 2 * (4 * (ws % 4) + ws / 4);
}
template <int N>
__device__ __forceinline__ void tma_norm_load(NormShare<N>& sh, const float* __restrict__ x,
                                              const float* __restrict__ nw, int r0, int nr, int cols, int s) {
    static_assert(N % 8 == 0, "the 256 consumers take whole rounds of a stage's words");
#pragma unroll
    for (int round = 0; round < N / 8; round++) {
        const int idx = threadIdx.x + 256 * round, n = idx / 32, k = norm_share_k(idx, s);
        sh.v[round] = sh.g[round] = make_float2(0.0f, 0.0f);
        if (n < nr && k < cols) {
            sh.v[round] = *(const float2*)(x + (u64)(r0 + n) * cols + k);
            sh.g[round] = *(const float2*)(nw + k);
        }
    }
}
// Stage s's activation tile at `slot` from the loaded share: row n as rms_norm's rounded copy
// holds it, bf16 of (x · inv) · nw, in the 128-byte swizzle a TMA copy gives it (16-byte piece c
// of row n at piece c ^ (n % 8)); zeros past the rows and K, as TMA fills. Then visible to the
// tensor cores (the async proxy) once the consumers' barrier (named barrier 1) has passed: both
// warpgroups read the tile, and every consumer warp has finished with this buffer's last stage
// (each waits for its products of the stage before last before it arrives here).
template <int N>
__device__ __forceinline__ void tma_norm_write(u32 slot, const NormShare<N>& sh, const float* inv, int nr, int cols,
                                               int s) {
#pragma unroll
    for (int round = 0; round < N / 8; round++) {
        const int idx = threadIdx.x + 256 * round, n = idx / 32, w = idx % 32, k = norm_share_k(idx, s);
        u32 word = 0;
        if (n < nr && k < cols) {
            const float y0 = __fmul_rn(__fmul_rn(sh.v[round].x, inv[n]), sh.g[round].x);
            const float y1 = __fmul_rn(__fmul_rn(sh.v[round].y, inv[n]), sh.g[round].y);
            word = bf16_bits(y0) | bf16_bits(y1) << 16;
        }
        const u32 at = slot + n * 128 + ((w / 4) ^ (n % 8)) * 16 + (w % 4) * 4;
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(at), "r"(word) : "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
}
