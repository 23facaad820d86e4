// Row-wise and element-wise ops: RMSNorm, residual add, bias add, SiLU*up, RoPE, row gather and
// the K/V store. Each output element's operations are fixed by the row's length alone; the launch
// shape never depends on the number of rows (one block or thread per row or element).

#define NORM_THREADS 256
// linear.cu's split kernel computes this norm inside its blocks with these threads' arithmetic.
static_assert(NORM_THREADS == LIN_NORM_THREADS, "linear.cu's norm_rows takes rms_norm's threads");
// Columns a thread loads before it computes with any of them (a batch): rows of up to
// NORM_THREADS * NORM_BATCH columns take one round trip to memory a pass.
#define NORM_BATCH 16

// A thread's batch of a row: columns j0, j0 + NORM_THREADS, ... of p (zeros past `cols`).
__device__ __forceinline__ void norm_batch(const float* p, int j0, int cols, float (&v)[NORM_BATCH]) {
#pragma unroll
    for (int u = 0; u < NORM_BATCH; u++) {
        const int j = j0 + u * NORM_THREADS;
        v[u] = j < cols ? p[j] : 0.0f;
    }
}

// 1 / sqrt(mean of squares + eps) of a row from each thread's sum of squares `s`: warps reduce by
// the xor butterfly, and the NORM_THREADS / 32 warp sums are folded left in warp order.
__device__ __forceinline__ float norm_inv(float s, int cols, float eps) {
    __shared__ float part[NORM_THREADS / 32];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
    __syncthreads();
    return norm_inv_of(part, cols, eps);
}

// out[n, :] = x[n, :] / sqrt(mean(x[n, :]^2) + eps) * w. One block of NORM_THREADS per row:
// thread t takes columns t, t + 256, ... in one fmaf chain; warps reduce by the xor butterfly;
// the 8 warp sums are folded left in warp order.
// `xb`, when given, also gets each output as round_bf16 makes it (bf16, k-permuted): the copy the
// tensor-core `linear` reading this output takes (`CudaBackend::take_rounded`).
// `d`, when given, is first added to x in place (x[n, :] += d[n, :], as `add` does), and the norm
// reads the sums: `add` then `rms_norm` in one pass, with their bits (each thread reads back only
// the columns it wrote).
// Each pass loads a thread's columns NORM_BATCH at a time before computing with them, in the
// same order: the compiler could not move a load of x above a store to out or xb (they may
// alias), so every column had waited for its own round trip (16 of them at 4,096 columns).
__device__ __forceinline__ void rms_norm_body(float* x, const float* __restrict__ d, const float* __restrict__ w,
                                              float eps, float* __restrict__ out, int cols,
                                              unsigned short* __restrict__ xb) {
    float* xr = x + (u64)blockIdx.x * cols;
    float* orow = out + (u64)blockIdx.x * cols;
    const float* dr = d ? d + (u64)blockIdx.x * cols : nullptr;
    float s = 0.0f;
    for (int j0 = threadIdx.x; j0 < cols; j0 += NORM_BATCH * NORM_THREADS) {
        float v[NORM_BATCH], dv[NORM_BATCH];
        norm_batch(xr, j0, cols, v);
        if (dr) norm_batch(dr, j0, cols, dv);
#pragma unroll
        for (int u = 0; u < NORM_BATCH; u++) {
            const int j = j0 + u * NORM_THREADS;
            if (j >= cols) break;
            if (dr) {
                v[u] = __fadd_rn(v[u], dv[u]);
                xr[j] = v[u];
            }
            s = fmaf(v[u], v[u], s);
        }
    }
    const float inv = norm_inv(s, cols, eps);
    for (int j0 = threadIdx.x; j0 < cols; j0 += NORM_BATCH * NORM_THREADS) {
        float v[NORM_BATCH], wv[NORM_BATCH];
        norm_batch(xr, j0, cols, v);
        norm_batch(w, j0, cols, wv);
#pragma unroll
        for (int u = 0; u < NORM_BATCH; u++) {
            const int j = j0 + u * NORM_THREADS;
            if (j >= cols) break;
            const float y = __fmul_rn(__fmul_rn(v[u], inv), wv[u]);
            orow[j] = y;
            if (xb) xb[(u64)blockIdx.x * cols + kperm(j)] = (unsigned short)bf16_bits(y);
        }
    }
}

// rms_norm_body for a row of at most NORM_THREADS * NORM_BATCH columns (the 8B's 4,096, the default
// model's 576): each thread's columns are one batch, kept in registers from the first pass to
// the second instead of read back, and the norm weight's batch `wv` may come in already loaded
// (`have_w`). The same values in the same operations as rms_norm_body, so the same bits.
__device__ __forceinline__ void rms_norm_one(float* x, const float* __restrict__ d, const float* __restrict__ w,
                                             float eps, float* __restrict__ out, int cols,
                                             unsigned short* __restrict__ xb, float (&wv)[NORM_BATCH], bool have_w) {
    float* xr = x + (u64)blockIdx.x * cols;
    float* orow = out + (u64)blockIdx.x * cols;
    float v[NORM_BATCH], dv[NORM_BATCH];
    norm_batch(xr, threadIdx.x, cols, v);
    if (d) norm_batch(d + (u64)blockIdx.x * cols, threadIdx.x, cols, dv);
    if (!have_w) norm_batch(w, threadIdx.x, cols, wv);
    float s = 0.0f;
#pragma unroll
    for (int u = 0; u < NORM_BATCH; u++) {
        const int j = threadIdx.x + u * NORM_THREADS;
        if (j >= cols) break;
        if (d) {
            v[u] = __fadd_rn(v[u], dv[u]);
            xr[j] = v[u];
        }
        s = fmaf(v[u], v[u], s);
    }
    const float inv = norm_inv(s, cols, eps);
#pragma unroll
    for (int u = 0; u < NORM_BATCH; u++) {
        const int j = threadIdx.x + u * NORM_THREADS;
        if (j >= cols) break;
        const float y = __fmul_rn(__fmul_rn(v[u], inv), wv[u]);
        orow[j] = y;
        if (xb) xb[(u64)blockIdx.x * cols + kperm(j)] = (unsigned short)bf16_bits(y);
    }
}

// The norm kernels' entry: a row of one batch a thread loads its norm weight's batch before the
// wait on the kernel before (no kernel of a forward writes a weight, as in the `linear` kernels),
// so it arrives while that kernel finishes; then the wait, and the norm. The kernel after is let
// go right after the wait, or with PLUMB_NORM_LATE_RELEASE (`compile::norm_late_release`) only
// after the norm's stores: the next kernel still waits for this one's completion before reading
// anything of it, so only when its blocks may start (and stream weights) moves.
__device__ __forceinline__ void rms_norm_entry(float* x, const float* __restrict__ d, const float* __restrict__ w,
                                               float eps, float* __restrict__ out, int cols,
                                               unsigned short* __restrict__ xb) {
    const bool one = cols <= NORM_THREADS * NORM_BATCH;
    float wv[NORM_BATCH];
    if (one && EARLY_WEIGHTS) norm_batch(w, threadIdx.x, cols, wv);
#ifdef PLUMB_NORM_LATE_RELEASE
    PDL_WAIT();
#else
    PDL_ENTRY();
#endif
    if (one)
        rms_norm_one(x, d, w, eps, out, cols, xb, wv, EARLY_WEIGHTS);
    else
        rms_norm_body(x, d, w, eps, out, cols, xb);
#ifdef PLUMB_NORM_LATE_RELEASE
    PDL_LAUNCH();
#endif
}

extern "C" __global__ void __launch_bounds__(NORM_THREADS)
    rms_norm(const float* __restrict__ x, const float* __restrict__ w, float eps, float* __restrict__ out, int cols) { TL_BLOCK();
    rms_norm_entry(const_cast<float*>(x), nullptr, w, eps, out, cols, nullptr);
}

extern "C" __global__ void __launch_bounds__(NORM_THREADS)
    rms_norm_bf16(const float* __restrict__ x, const float* __restrict__ w, float eps, float* __restrict__ out,
                  int cols, unsigned short* __restrict__ xb) { TL_BLOCK();
    rms_norm_entry(const_cast<float*>(x), nullptr, w, eps, out, cols, xb);
}

// acc[n, :] += d[n, :], then out[n, :] = rms_norm(acc[n, :]) (`xb`, when not null, as in rms_norm_bf16).
extern "C" __global__ void __launch_bounds__(NORM_THREADS)
    add_rms_norm(float* acc, const float* __restrict__ d, const float* __restrict__ w, float eps,
                 float* __restrict__ out, int cols, unsigned short* __restrict__ xb) { TL_BLOCK();
    rms_norm_entry(acc, d, w, eps, out, cols, xb);
}

// acc += x.
extern "C" __global__ void add(float* __restrict__ acc, const float* __restrict__ x, u64 n) { TL_BLOCK();
    PDL_ENTRY();
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] = __fadd_rn(acc[i], x[i]);
}

// x[n, j] += bias[j].
extern "C" __global__ void add_bias(float* __restrict__ x, const float* __restrict__ bias, u64 n, int cols) { TL_BLOCK();
    PDL_ENTRY();
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fadd_rn(x[i], bias[i % cols]);
}

// out = gate / (1 + e^-gate) * up.
extern "C" __global__ void silu_mul(const float* __restrict__ gate, const float* __restrict__ up,
                                    float* __restrict__ out, u64 n) { TL_BLOCK();
    PDL_ENTRY();
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float g = gate[i];
        out[i] = silu_times(g, up[i]);
    }
}

// silu_mul that also writes its output as round_bf16 makes it (rows of a multiple of 32 columns,
// so the flat index's groups of 32 are the rows' own): the copy the down projection takes.
extern "C" __global__ void silu_mul_bf16(const float* __restrict__ gate, const float* __restrict__ up,
                                         float* __restrict__ out, u64 n, unsigned short* __restrict__ xb) { TL_BLOCK();
    PDL_ENTRY();
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float g = gate[i];
        const float y = silu_times(g, up[i]);
        out[i] = y;
        const u64 j = (i % 32) / 2;
        xb[(i / 32) * 32 + 2 * (4 * (j % 4) + j / 4) + i % 2] = (unsigned short)bf16_bits(y);
    }
}

// Rotates adjacent pairs (x[2i], x[2i+1]) of each head by the row's (cos, sin) table
// ([num_rows, 2 * half]: cos then sin). One thread per (row, head, pair).
extern "C" __global__ void rope(float* __restrict__ x, const float* __restrict__ table, int num_rows, int cols,
                                int half, int num_heads, int head_dim) { TL_BLOCK();
    PDL_ENTRY();
    u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (u64)num_rows * num_heads * half) return;
    int i = (int)(t % half);
    int head = (int)((t / half) % num_heads);
    int row = (int)(t / ((u64)half * num_heads));
    float c = table[(u64)row * 2 * half + i];
    float s = table[(u64)row * 2 * half + half + i];
    float* h = x + (u64)row * cols + (u64)head * head_dim;
    float x0 = h[2 * i], x1 = h[2 * i + 1];
    h[2 * i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    h[2 * i + 1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// Rotate-half RoPE (the Hugging Face layout): pairs (x[i], x[i + half]) of each head.
extern "C" __global__ void rope_rotate_half(float* __restrict__ x, const float* __restrict__ table, int num_rows,
                                            int cols, int half, int num_heads, int head_dim) { TL_BLOCK();
    PDL_ENTRY();
    u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (u64)num_rows * num_heads * half) return;
    int i = (int)(t % half);
    int head = (int)((t / half) % num_heads);
    int row = (int)(t / ((u64)half * num_heads));
    float c = table[(u64)row * 2 * half + i];
    float s = table[(u64)row * 2 * half + half + i];
    float* h = x + (u64)row * cols + (u64)head * head_dim;
    float x0 = h[i], x1 = h[i + half];
    h[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    h[i + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

// `rope` (adjacent pairs) or, with rotate_half, `rope_rotate_half` of q's heads and of k's in one
// launch: threads below q's pair count rotate q, the rest k, each with its layout's arithmetic
// above (so the bits of the two launches apart). q: [num_rows, q_heads · head_dim], k likewise.
extern "C" __global__ void rope_qk(float* __restrict__ q, float* __restrict__ k, const float* __restrict__ table,
                                   int num_rows, int half, int q_heads, int k_heads, int head_dim, int rotate_half) { TL_BLOCK();
    PDL_ENTRY();
    u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 nq = (u64)num_rows * q_heads * half;
    if (t >= nq + (u64)num_rows * k_heads * half) return;
    float* x = q;
    int heads = q_heads;
    if (t >= nq) {
        t -= nq;
        x = k;
        heads = k_heads;
    }
    int i = (int)(t % half);
    int head = (int)((t / half) % heads);
    int row = (int)(t / ((u64)half * heads));
    float c = table[(u64)row * 2 * half + i];
    float s = table[(u64)row * 2 * half + half + i];
    float* h = x + (u64)row * heads * head_dim + (u64)head * head_dim;
    if (rotate_half) {
        float x0 = h[i], x1 = h[i + half];
        h[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        h[i + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
    } else {
        float x0 = h[2 * i], x1 = h[2 * i + 1];
        h[2 * i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        h[2 * i + 1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
}

// out[i, :] = x[rows[i], :]. One block per output row.
extern "C" __global__ void gather_rows(const float* __restrict__ x, const u32* __restrict__ rows,
                                       float* __restrict__ out, int cols) { TL_BLOCK();
    PDL_ENTRY();
    const float* src = x + (u64)rows[blockIdx.x] * cols;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) out[(u64)blockIdx.x * cols + j] = src[j];
}
