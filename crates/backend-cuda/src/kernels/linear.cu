// linear: out[n, m] = sum_k x[n, k] * w[m, k], and embed: out[n, :] = dequantized table[ids[n], :].
//
// The canonical arithmetic of one output element (GPU.md's chunked-K fold), fixed by K alone:
// K is cut into chunks of LIN_KC = 256 (the last may be shorter). Inside chunk c, lane l of a warp
// takes k = c*256 + 32*j + l for j = 0..7 in ascending j, one fmaf chain from 0 (elements past K
// count as 0*0); the 32 lane partials are summed by the fixed xor butterfly (offsets 16, 8, 4, 2,
// 1; both halves of a pair compute a+b and b+a, so every lane holds the same bits). The element is
// the left fold p0, p0+p1, (p0+p1)+p2, ... in ascending chunk order. Weights are dequantized by
// `deq<TY>` (exact, one rule per format).
// A block computes LIN_WARPS output features for up to LIN_ROWS activation rows; how many rows a
// block takes changes which elements are computed together, never an element's operations — so
// row r of a batch of M is bit-identical to that row alone, for every M.

#define LIN_KC 256
#define LIN_ROWS 16
#define LIN_WARPS 8

// Up to three weights that read the same input run as one launch (`linear_multi`: q|k|v,
// gate|up): weight s has n_s features and an output of its own, and a launch's units (blocks or
// tiles of `per` features) go to the weights in order, each starting on a fresh unit. Which
// weight unit `u` falls in and the unit within it; n1 = n2 = 0 for one weight. A feature's
// operations do not depend on its neighbours, so this changes no bit of any output.
struct Seg {
    int s, u;
};
__device__ __forceinline__ Seg seg_of(int u, int per, int n0, int n1) {
    const int u1 = (n0 + per - 1) / per, u2 = u1 + (n1 + per - 1) / per;
    return u < u1 ? Seg{0, u} : u < u2 ? Seg{1, u - u1} : Seg{2, u - u2};
}
template <typename T>
__device__ __forceinline__ T pick3(int s, T a, T b, T c) {
    return s == 0 ? a : s == 1 ? b : c;
}

// An output element, or with `resid` (`linear_add`) its sum with the element already there, the
// residual the product is added into: `add`'s arithmetic (elementwise.cu), by the one thread that
// owns the element, so no other reads it meanwhile.
__device__ __forceinline__ void store_out(float* o, float y, int resid) {
    *o = resid ? __fadd_rn(*o, y) : y;
}

// silu(g) · u, the SwiGLU of a gate and an up product: silu_mul's arithmetic (elementwise.cu), one
// definition for every kernel that computes it.
__device__ __forceinline__ float silu_times(float g, float u) {
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

// RoPE of q and k and the K/V store after a q|k|v split launch (`norm_qkv_rope_write_kv`): the
// step's cos/sin table ([rows][2 * half]), each row's cache slot, the layer's K and V caches in
// the store `st` (kv_store.cu), `half` rotated pairs of adjacent dims a head of `head_dim`. Off
// where `table` is null.
struct QkvRope {
    const float* table;
    const u32* slots;
    u8* kc;
    u8* vc;
    int st, half, head_dim;
};

// rms_norm's threads (NORM_THREADS in elementwise.cu, which checks the two agree): a norm computed
// inside a `linear_split` block (`norm_rows`) takes their columns and their order.
#define LIN_NORM_THREADS 256

// 1 / sqrt(mean of squares + eps) of a row of `cols` from its LIN_NORM_THREADS / 32 warp sums,
// folded left in warp order: the one definition of the step rms_norm (elementwise.cu's norm_inv)
// and the split kernel's norm_rows share.
__device__ __forceinline__ float norm_inv_of(const float* warp_sums, int cols, float eps) {
    float total = warp_sums[0];
#pragma unroll
    for (int i = 1; i < LIN_NORM_THREADS / 32; i++) total = __fadd_rn(total, warp_sums[i]);
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(total, (float)cols), eps)));
}

template <int TY>
__device__ __forceinline__ void linear_body(const float* __restrict__ x, const u8* __restrict__ w, u64 row_bytes,
                                            float* __restrict__ out, int num_rows, int n_out, int k_in, int bx,
                                            int resid) {
    __shared__ float xs[LIN_ROWS][LIN_KC];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int m = bx * LIN_WARPS + warp;
    const int r0 = blockIdx.y * LIN_ROWS;
    const int rows = min(LIN_ROWS, num_rows - r0);
    // Warps past the last feature still join the barriers; they read a valid row and write nothing.
    const u8* wrow = w + (u64)min(m, n_out - 1) * row_bytes;
    float acc[LIN_ROWS];
#pragma unroll
    for (int r = 0; r < LIN_ROWS; r++) acc[r] = 0.0f;
    for (int c0 = 0; c0 < k_in; c0 += LIN_KC) {
        const int clen = min(LIN_KC, k_in - c0);
        __syncthreads();
        for (int i = threadIdx.x; i < LIN_ROWS * LIN_KC; i += blockDim.x) {
            int r = i / LIN_KC, kk = i % LIN_KC;
            xs[r][kk] = (r < rows && kk < clen) ? x[(u64)(r0 + r) * k_in + c0 + kk] : 0.0f;
        }
        __syncthreads();
        float wv[LIN_KC / 32];
#pragma unroll
        for (int j = 0; j < LIN_KC / 32; j++) {
            int kk = j * 32 + lane;
            wv[j] = kk < clen ? deq<TY>(wrow, c0 + kk) : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < LIN_ROWS; r++) {
            if (r < rows) {
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < LIN_KC / 32; j++) s = fmaf(xs[r][j * 32 + lane], wv[j], s);
#pragma unroll
                for (int off = 16; off > 0; off >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
                acc[r] = c0 == 0 ? s : __fadd_rn(acc[r], s);
            }
        }
    }
    if (m < n_out && lane == 0) {
#pragma unroll
        for (int r = 0; r < LIN_ROWS; r++) {
            if (r < rows) store_out(out + (u64)(r0 + r) * n_out + m, acc[r], resid);
        }
    }
}

// The same elements for few rows (decode and verify steps), with K chunks spread over warps
// instead of walked by one: a block takes LIN_SPLIT_FEAT features of up to LIN_ROWS rows; each
// warp task (feature, chunk) computes that chunk's partial for every row exactly as
// `linear_body` does (the same eight fmafs per lane, zeros past K included, the same butterfly),
// into shared memory; then one thread per (feature, row) folds the partials in ascending chunk
// order. Same partials, same fold: bit-identical to `linear_body`, with K/256 times the warps in
// flight (a decode step's projections have too few features to fill the GPU otherwise). A block
// has a warp per task up to LIN_SPLIT_MAX_WARPS (the launch sizes it), so each warp's weight
// loads go out once rather than in rounds.
// With `glu` (w the gate, w1 up: `CudaBackend::linear_swiglu`) a block also takes up's same
// features and writes silu(gate) · up, silu_mul's arithmetic on the two folded products: the bits
// of the two products and silu_mul apart, in one launch.
#define LIN_SPLIT_FEAT 4
#define LIN_SPLIT_MAX_CHUNKS 64
#define LIN_SPLIT_MAX_WARPS 24

// Bytes of one 256-element chunk of a row in a block format (0: a float format, read in place);
// every block format's chunk is whole blocks of an even number of bytes, at most 272 (Q8_0).
template <int TY>
__device__ __forceinline__ constexpr int chunk_bytes() {
    return TY == TY_Q4_0 ? 144 : TY == TY_Q4_1 ? 160 : TY == TY_Q5_0 ? 176 : TY == TY_Q5_1 ? 192
         : TY == TY_Q8_0 ? 272 : TY == TY_Q2_K ? 84 : TY == TY_Q3_K ? 110 : TY == TY_Q4_K ? 144
         : TY == TY_Q5_K ? 176 : TY == TY_Q6_K ? 210 : 0;
}
#define LIN_STAGE_BYTES 272

// A warp's copy of chunk bytes [0, n) from `src` into its shared buffer `dst`, in coalesced 4-byte
// (or 2-byte, where the chunk is not 4-aligned) loads, all issued before any store; the warp's
// lanes then read their elements' bytes from there. Only where the bytes come from changes: each
// element is dequantized by the same `deq` from the same bytes.
__device__ __forceinline__ void stage_chunk(u8* dst, const u8* __restrict__ src, int n, int lane) {
    if ((((u64)src | (u64)n) & 3) == 0) {
        const u32* s4 = (const u32*)src;
        u32* d4 = (u32*)dst;
        const int words = n / 4;
        u32 v[3];
#pragma unroll
        for (int i = 0; i < 3; i++) v[i] = lane + 32 * i < words ? s4[lane + 32 * i] : 0u;
#pragma unroll
        for (int i = 0; i < 3; i++)
            if (lane + 32 * i < words) d4[lane + 32 * i] = v[i];
    } else {
        const unsigned short* s2 = (const unsigned short*)src;
        unsigned short* d2 = (unsigned short*)dst;
        const int halves = n / 2;
        unsigned short v[5];
#pragma unroll
        for (int i = 0; i < 5; i++) v[i] = lane + 32 * i < halves ? s2[lane + 32 * i] : (unsigned short)0;
#pragma unroll
        for (int i = 0; i < 5; i++)
            if (lane + 32 * i < halves) d2[lane + 32 * i] = v[i];
    }
    __syncwarp();
}

// rms_norm's 1 / sqrt(mean of squares + eps) of `rows` rows of x into inv[], inside a block of
// LIN_NORM_THREADS threads or more, with the norm kernel's arithmetic (elementwise.cu's
// rms_norm_one and norm_inv): its thread t is this block's thread t, summing the squares of columns
// t, t + 256, ... in one fmaf chain; warps reduce by the xor butterfly; the eight warp sums fold
// left in warp order. So `linear_split` computes rms_norm's outputs bit for bit as it reads x.
__device__ __forceinline__ void norm_rows(const float* __restrict__ x, int rows, int cols, float eps,
                                          float* inv, int warp, int lane) {
    __shared__ float sums[LIN_ROWS][LIN_NORM_THREADS / 32];
    if (warp < LIN_NORM_THREADS / 32) {
        for (int r = 0; r < rows; r++) {
            const float* xr = x + (u64)r * cols;
            float s = 0.0f;
            for (int j = warp * 32 + lane; j < cols; j += LIN_NORM_THREADS) s = fmaf(xr[j], xr[j], s);
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
            if (lane == 0) sums[r][warp] = s;
        }
    }
    __syncthreads();
    if (threadIdx.x < rows) inv[threadIdx.x] = norm_inv_of(sums[threadIdx.x], cols, eps);
    __syncthreads();
}

template <int TY>
__device__ __forceinline__ void linear_split_body(const float* __restrict__ x, const u8* __restrict__ w,
                                                  u64 row_bytes, float* __restrict__ out, int num_rows, int n_out,
                                                  int k_in, int bx, int staged, const u8* __restrict__ w_up,
                                                  const float* __restrict__ nw, float eps, int resid, int seg,
                                                  QkvRope rk) {
    // [task][row]: task f * chunks + c of feature f (with `w_up`, features LIN_SPLIT_FEAT.. are up's).
    __shared__ float part[LIN_SPLIT_FEAT * LIN_SPLIT_MAX_CHUNKS][LIN_ROWS];
    // With `nw`: each row's 1 / rms (norm_rows).
    __shared__ float inv[LIN_ROWS];
    __shared__ __align__(16) u8 stage[LIN_SPLIT_MAX_WARPS][LIN_STAGE_BYTES];
    constexpr int CB = chunk_bytes<TY>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int num_chunks = (k_in + LIN_KC - 1) / LIN_KC;
    const int f0 = bx * LIN_SPLIT_FEAT;
    const int r0 = blockIdx.y * LIN_ROWS;
    const int rows = min(LIN_ROWS, num_rows - r0);
    // With `w_up` (a SwiGLU), the block's features of w (the gate), then the same features of
    // w_up: tasks 0.. of the gate's, LIN_SPLIT_FEAT * num_chunks.. of up's.
    const int tasks = (w_up ? 2 : 1) * LIN_SPLIT_FEAT * num_chunks;
    // The weight row of the block's task feature f.
    auto row_of = [&](int f) {
        return (f < LIN_SPLIT_FEAT ? w : w_up) + (u64)min(f0 + f % LIN_SPLIT_FEAT, n_out - 1) * row_bytes;
    };
    // The chunk's bytes of task t (whole blocks: clen is a multiple of the block) into this warp's
    // shared buffer. A warp's first task copies them before waiting on the kernel before (the
    // kernel's PDL_LAUNCH came first; weights are never written by a forward's kernels, dequant.cu).
    auto stage_task = [&](int t) {
        const int c = t % num_chunks, clen = min(LIN_KC, k_in - c * LIN_KC);
        const u8* wrow = row_of(t / num_chunks);
        stage_chunk(stage[warp], wrow + (u64)c * CB, clen == LIN_KC ? CB : (int)((u64)CB * clen / LIN_KC), lane);
    };
    const bool early = EARLY_WEIGHTS && CB > 0 && staged;
    if (early && warp < tasks) stage_task(warp);
    PDL_WAIT();
    if (nw) norm_rows(x + (u64)r0 * k_in, rows, k_in, eps, inv, warp, lane);
    for (int t = warp; t < tasks; t += blockDim.x / 32) {
        const int c = t % num_chunks;
        const int c0 = c * LIN_KC;
        const int clen = min(LIN_KC, k_in - c0);
        const u8* wrow = row_of(t / num_chunks);
        float wv[LIN_KC / 32];
        if (CB > 0 && staged) {
            u8* st = stage[warp];
            if (!early || t != warp) stage_task(t);
#pragma unroll
            for (int j = 0; j < LIN_KC / 32; j++) {
                int kk = j * 32 + lane;
                wv[j] = kk < clen ? deq<TY>(st, kk) : 0.0f;
            }
            __syncwarp();  // every lane has its bytes before the next task's copy
        } else {
#pragma unroll
            for (int j = 0; j < LIN_KC / 32; j++) {
                int kk = j * 32 + lane;
                wv[j] = kk < clen ? deq<TY>(wrow, c0 + kk) : 0.0f;
            }
        }
        for (int r = 0; r < rows; r++) {
            const float* xr = x + (u64)(r0 + r) * k_in + c0;
            float xv[LIN_KC / 32];
#pragma unroll
            for (int j = 0; j < LIN_KC / 32; j++) {
                int kk = j * 32 + lane;
                // With `nw`, rms_norm's output element as that kernel computes it.
                xv[j] = kk >= clen ? 0.0f : nw ? __fmul_rn(__fmul_rn(xr[kk], inv[r]), nw[c0 + kk]) : xr[kk];
            }
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < LIN_KC / 32; j++) s = fmaf(xv[j], wv[j], s);
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
            if (lane == 0) part[t][r] = s;
        }
    }
    __syncthreads();
    // The fold of task feature f's partials in chunk order.
    auto fold = [&](int f, int r) {
        float acc = part[f * num_chunks][r];
        for (int c = 1; c < num_chunks; c++) acc = __fadd_rn(acc, part[f * num_chunks + c][r]);
        return acc;
    };
    for (int t = threadIdx.x; t < LIN_SPLIT_FEAT * rows; t += blockDim.x) {
        const int f = t / rows, r = t % rows;
        const int m = f0 + f;
        if (m >= n_out) continue;
        float y = fold(f, r);
        if (w_up) {
            // silu_mul's arithmetic (elementwise.cu) on the two products, as it would read them.
            const float g = y;
            y = silu_times(g, fold(LIN_SPLIT_FEAT + f, r));
        }
        if (rk.table && seg < 2) {
            // q (weight 0) and k (1) rotated as rope_write_kv rotates adjacent pairs (attention.cu),
            // on the folded products: the pair's other feature is this block's feature f ^ 1.
            const int d = m % rk.head_dim, p = d / 2;
            if (p < rk.half) {
                const float o = fold(f ^ 1, r), x0 = d % 2 ? o : y, x1 = d % 2 ? y : o;
                const float* tr = rk.table + (u64)(r0 + r) * 2 * rk.half;
                const float c = tr[p], sn = tr[rk.half + p];
                y = d % 2 ? __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c))
                          : __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
            }
        }
        store_out(out + (u64)(r0 + r) * n_out + m, y, resid);
        if (rk.table && seg > 0) {
            // k (rotated) and v (weight 2) at the row's cache slot, as rope_write_kv stores them.
            const u64 at = (u64)rk.slots[r0 + r] * n_out + m;
            kv_store_as(rk.st, (seg == 1 ? rk.kc : rk.vc) + at * kv_bytes(rk.st), y);
        }
    }
}

// The same elements for weights of many features read by few rows (the default model's LM head:
// 49,152 features of K = 576 at one row), where linear_split's blocks of four features run as
// many short waves as they have blocks. A warp takes LIN_WIDE_FEAT features at a time: their
// whole rows come into registers with every load in flight at once, go to the warp's shared
// buffer, and the warp computes them there. By default a block takes one group of features; on a
// persistent grid (PLUMB_CUDA_WIDE_PERSIST=1) each block walks groups blockIdx.x, + gridDim.x,
// ..., the loads of its next group's rows in flight while it computes (the host's choice, which
// does not change an element's arithmetic). The block stages its rows of x once. Per feature and row, the chunks in ascending
// order, each chunk's partial computed as linear_split's task computes it (the same eight fmafs
// per lane, zeros past K, the same butterfly) and folded left in a register. Same partials, same
// fold: bit-identical to linear_split and linear_body.
#define LIN_WIDE_WARPS 8
#define LIN_WIDE_FEAT 2
#define LIN_WIDE_ROWS 4
// The most bytes of a weight row it takes (whole 4-byte words), and of K.
#define LIN_WIDE_ROW_BYTES 1088
#define LIN_WIDE_MAX_K 1024
#define LIN_WIDE_WORDS ((LIN_WIDE_ROW_BYTES / 4 + 31) / 32)

template <int TY>
__device__ __forceinline__ void linear_wide_body(const float* __restrict__ x, const u8* __restrict__ w,
                                                 u64 row_bytes, float* __restrict__ out, int num_rows, int n_out,
                                                 int k_in, int resid) {
    __shared__ __align__(16) u32 rows_st[LIN_WIDE_WARPS][LIN_WIDE_FEAT][LIN_WIDE_ROW_BYTES / 4];
    __shared__ float xs[LIN_WIDE_ROWS][LIN_WIDE_MAX_K];
    // Q8_0: each block's f16 scale as f32, converted once a row instead of once an element.
    __shared__ float scales[LIN_WIDE_WARPS][LIN_WIDE_FEAT][LIN_WIDE_MAX_K / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int words = (int)(row_bytes / 4);
    const int groups = (n_out + LIN_WIDE_WARPS * LIN_WIDE_FEAT - 1) / (LIN_WIDE_WARPS * LIN_WIDE_FEAT);
    // The warp's rows of group g into registers (features past the last read a valid row).
    u32 v[LIN_WIDE_FEAT][LIN_WIDE_WORDS];
    auto load = [&](int g) {
        const int f0 = (g * LIN_WIDE_WARPS + warp) * LIN_WIDE_FEAT;
#pragma unroll
        for (int i = 0; i < LIN_WIDE_FEAT; i++) {
            const u32* src = (const u32*)(w + (u64)min(f0 + i, n_out - 1) * row_bytes);
#pragma unroll
            for (int q = 0; q < LIN_WIDE_WORDS; q++) v[i][q] = lane + 32 * q < words ? src[lane + 32 * q] : 0u;
        }
    };
    // No kernel of a forward writes a weight (dequant.cu): the first loads go out before the wait
    // on the kernel before, unless PLUMB_LATE_WEIGHTS.
    if (!EARLY_WEIGHTS) PDL_WAIT();
    int g = blockIdx.x;
    if (g < groups) load(g);
    if (EARLY_WEIGHTS) PDL_WAIT();
    for (int i = threadIdx.x; i < num_rows * k_in; i += blockDim.x) xs[i / k_in][i % k_in] = x[i];
    __syncthreads();
    const int num_chunks = (k_in + LIN_KC - 1) / LIN_KC;
    for (; g < groups; g += gridDim.x) {
#pragma unroll
        for (int i = 0; i < LIN_WIDE_FEAT; i++)
#pragma unroll
            for (int q = 0; q < LIN_WIDE_WORDS; q++)
                if (lane + 32 * q < words) rows_st[warp][i][lane + 32 * q] = v[i][q];
        __syncwarp();  // the buffer whole before any lane reads it
        if (g + (int)gridDim.x < groups) load(g + gridDim.x);
        if (TY == TY_Q8_0) {
            for (int i = 0; i < LIN_WIDE_FEAT; i++)
                for (int b = lane; b < k_in / 32; b += 32)
                    scales[warp][i][b] = f16_at((const u8*)rows_st[warp][i] + b * 34, 0);
            __syncwarp();
        }
        const int f0 = (g * LIN_WIDE_WARPS + warp) * LIN_WIDE_FEAT;
        for (int i = 0; i < LIN_WIDE_FEAT; i++) {
            const int m = f0 + i;
            const u8* st = (const u8*)rows_st[warp][i];
            for (int r = 0; r < num_rows; r++) {
                float acc = 0.0f;
                for (int c = 0; c < num_chunks; c++) {
                    const int c0 = c * LIN_KC, clen = min(LIN_KC, k_in - c0);
                    float s = 0.0f;
#pragma unroll
                    for (int j = 0; j < LIN_KC / 32; j++) {
                        const int kk = j * 32 + lane;
                        // deq<Q8_0>'s product, its scale from the table above.
                        const int e = c0 + kk;
                        const float wv = kk >= clen          ? 0.0f
                                         : TY == TY_Q8_0 ? __fmul_rn((float)(signed char)st[e / 32 * 34 + 2 + e % 32],
                                                                     scales[warp][i][e / 32])
                                                         : deq<TY>(st, e);
                        const float xv = kk < clen ? xs[r][c0 + kk] : 0.0f;
                        s = fmaf(xv, wv, s);
                    }
#pragma unroll
                    for (int off = 16; off > 0; off >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
                    acc = c == 0 ? s : __fadd_rn(acc, s);
                }
                if (lane == 0 && m < n_out) store_out(out + (u64)r * n_out + m, acc, resid);
            }
        }
        __syncwarp();  // every lane done with the buffer before the next group's rows overwrite it
    }
}

template <int TY>
__device__ __forceinline__ void embed_body(const u32* __restrict__ ids, const u8* __restrict__ table, u64 row_bytes,
                                           float* __restrict__ out, int cols) {
    const u8* row = table + (u64)ids[blockIdx.x] * row_bytes;
    for (int k = threadIdx.x; k < cols; k += blockDim.x) out[(u64)blockIdx.x * cols + k] = deq<TY>(row, k);
}

// The linear kernels take up to three weights (`seg_of`): w, out and n_out are weight 0's.
#define LINEAR_SEGS(PER)                                                                                      \
    const Seg sg = seg_of(blockIdx.x, PER, n_out, n1);                                                        \
    const u8* ws = pick3(sg.s, w, w1, w2);                                                                    \
    float* os = pick3(sg.s, out, out1, out2);                                                                 \
    const int ns = pick3(sg.s, n_out, n1, n2);
#define LINEAR_KERNELS(NAME, TY)                                                                              \
    extern "C" __global__ void __launch_bounds__(LIN_WARPS * 32)                                              \
        linear_##NAME(const float* x, const u8* w, const u8* w1, const u8* w2, u64 row_bytes, float* out,       \
                      float* out1, float* out2, int num_rows, int n_out, int n1, int n2, int k_in, int staged,     \
                      int glu, const float* nw, float eps, int resid, const float* rope_table,                \
                      const u32* kv_slots, u8* k_cache, u8* v_cache, int kv_st, int rope_half, int head_dim) { TL_BLOCK();    \
        PDL_ENTRY();                                                                                          \
        /* the split kernel's switches (both take one argument list): never set for this one */              \
        (void)staged; (void)glu; (void)nw; (void)eps; (void)rope_table; (void)kv_slots; (void)k_cache;        \
        (void)v_cache; (void)kv_st; (void)rope_half; (void)head_dim;                                          \
        LINEAR_SEGS(LIN_WARPS)                                                                                \
        linear_body<TY>(x, ws, row_bytes, os, num_rows, ns, k_in, sg.u, resid);                               \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(LIN_SPLIT_MAX_WARPS * 32) linear_split_##NAME(              \
        const float* x, const u8* w, const u8* w1, const u8* w2, u64 row_bytes, float* out, float* out1,      \
        float* out2, int num_rows, int n_out, int n1, int n2, int k_in, int staged, int glu, const float* nw,  \
        float eps, int resid, const float* rope_table, const u32* kv_slots, u8* k_cache, u8* v_cache, int kv_st, \
        int rope_half, int head_dim) { TL_BLOCK(); PDL_LAUNCH();                                                          \
        LINEAR_SEGS(LIN_SPLIT_FEAT) /* the body waits (PDL_WAIT) once its first weight bytes are asked for */ \
        const QkvRope rk{rope_table, kv_slots, k_cache, v_cache, kv_st, rope_half, head_dim};                 \
        linear_split_body<TY>(x, ws, row_bytes, os, num_rows, ns, k_in, sg.u, staged, glu ? w1 : nullptr, nw, \
                              eps, resid, sg.s, rk);                                                          \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(LIN_WIDE_WARPS * 32) linear_wide_##NAME(                   \
        const float* x, const u8* w, u64 row_bytes, float* out, int num_rows, int n_out, int k_in, int resid) { TL_BLOCK(); \
        PDL_LAUNCH(); /* the body waits (PDL_WAIT) once its weight rows are asked for */                      \
        linear_wide_body<TY>(x, w, row_bytes, out, num_rows, n_out, k_in, resid);                            \
    }                                                                                                         \
    extern "C" __global__ void embed_##NAME(const u32* ids, const u8* table, u64 row_bytes, float* out, int cols) { TL_BLOCK(); PDL_ENTRY(); \
        embed_body<TY>(ids, table, row_bytes, out, cols);                                                     \
    }

FOR_EACH_TYPE(LINEAR_KERNELS)
