// Sampling reductions (`Backend::pick`; crates/core/src/pick.rs is the definition): the logit
// edits of a request's bias and penalties, then a row's argmax or its k best candidates. Every
// result is a pure function of the row: values are compared and copied, never summed, and the
// integer counts of the radix select are exact whatever order threads add them in.

#define PICK_THREADS 1024
#define PICK_MAX_K 256

// The float's place in IEEE total order (`f32::total_cmp`) as an unsigned key.
__device__ __forceinline__ unsigned total_key(float x) {
    unsigned u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The argmax order (IEEE `>`): +0 and -0 equal, NaN below every number.
__device__ __forceinline__ unsigned argmax_key(float x) {
    if (isnan(x)) return 0u;
    return total_key(x == 0.0f ? 0.0f : x);
}

// A (key, index) pair as one unique 64-bit value: larger key first, then lower index.
__device__ __forceinline__ u64 pick_pack(unsigned key, int j) {
    return ((u64)key << 32) | (u64)(0xFFFFFFFFu - (unsigned)j);
}

__device__ __forceinline__ unsigned pick_index(u64 p) {
    return 0xFFFFFFFFu - (unsigned)(p & 0xFFFFFFFFull);
}

// One thread per edit; an edit is 9 words: row, token, has_bias, bias, repeated, count, then the
// row's repetition, frequency and presence penalties (float bits). The sampler's float32 order;
// a NaN result is the canonical 0x7FC00000, as on the host.
extern "C" __global__ void apply_logit_edits(float* __restrict__ logits, const unsigned* __restrict__ e, int n, int cols) { TL_BLOCK();
    PDL_ENTRY();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const unsigned* w = e + (u64)i * 9;
    float* l = logits + (u64)w[0] * cols + w[1];
    float v = *l;
    if (w[2]) v = __fadd_rn(v, __uint_as_float(w[3]));
    if (w[4]) {
        const float r = __uint_as_float(w[6]);
        v = v > 0.0f ? __fdiv_rn(v, r) : __fmul_rn(v, r);
    }
    if (w[5]) v = __fsub_rn(v, __fadd_rn(__fmul_rn(__uint2float_rn(w[5]), __uint_as_float(w[7])), __uint_as_float(w[8])));
    *l = isnan(v) ? __uint_as_float(0x7FC00000u) : v;  // the one NaN of LogitEdit::apply
}

// A row's argmax over gridDim.y blocks (a decode step's one row over one SM took 20 us for
// Llama 3's 128,256 logits): block (b, s) takes columns [s * span, (s + 1) * span) of row
// rows[b] and writes the largest packed (key, index) among them to part[b * gridDim.y + s]
// (0, below every pack, when it has none). The maximum of unique packs is the same in any
// order, so the split leaves the result as one block's scan would have it.
#define ARGMAX_THREADS 256
extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
    pick_argmax_part(const float* __restrict__ logits, const unsigned* __restrict__ rows, int cols, int span,
                     u64* __restrict__ part) { TL_BLOCK();
    PDL_ENTRY();
    const float* r = logits + (u64)rows[blockIdx.x] * cols;
    const int end = min(cols, (int)(blockIdx.y + 1) * span);
    u64 best = 0;
    for (int j = (int)blockIdx.y * span + (int)threadIdx.x; j < end; j += ARGMAX_THREADS) {
        const u64 p = pick_pack(argmax_key(r[j]), j);
        best = p > best ? p : best;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const u64 o = __shfl_xor_sync(0xffffffffu, best, off);
        best = o > best ? o : best;
    }
    __shared__ u64 warp_best[ARGMAX_THREADS / 32];
    if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < ARGMAX_THREADS / 32; i++) best = warp_best[i] > best ? warp_best[i] : best;
        part[(u64)blockIdx.x * gridDim.y + blockIdx.y] = best;
    }
}

// out[b] = the argmax of row rows[b] from its `splits` parts: one warp a row. A NaN at index 0
// wins (nothing is `>` it).
extern "C" __global__ void pick_argmax_fold(const float* __restrict__ logits, const unsigned* __restrict__ rows,
                                            int cols, const u64* __restrict__ part, int splits,
                                            unsigned* __restrict__ out) { TL_BLOCK();
    PDL_ENTRY();
    u64 best = 0;
    for (int s = threadIdx.x; s < splits; s += 32) {
        const u64 p = part[(u64)blockIdx.x * splits + s];
        best = p > best ? p : best;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const u64 o = __shfl_xor_sync(0xffffffffu, best, off);
        best = o > best ? o : best;
    }
    if (threadIdx.x == 0) out[blockIdx.x] = isnan(logits[(u64)rows[blockIdx.x] * cols]) ? 0u : pick_index(best);
}

// The k best entries of row r by `key` (ties by lower index), best first, as (index, value bits)
// pairs at o. A radix select finds the k-th largest packed (key, index) value, 8 bits at a time
// from the top; the k values at or above it are then ranked by counting (packs are unique, so
// ranks are too). Every thread of the block calls it.
template <unsigned (*key)(float)>
__device__ void top_k_of_row(const float* __restrict__ r, int cols, unsigned k, unsigned* __restrict__ o) {
    __shared__ unsigned hist[256];
    __shared__ u64 chosen_prefix;
    __shared__ unsigned chosen_remaining;
    __shared__ u64 cand[PICK_MAX_K];
    __shared__ unsigned num_cand;
    u64 prefix = 0, mask = 0;
    unsigned remaining = k;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += PICK_THREADS) hist[b] = 0;
        __syncthreads();
        for (int j = threadIdx.x; j < cols; j += PICK_THREADS) {
            const u64 p = pick_pack(key(r[j]), j);
            if ((p & mask) == prefix) atomicAdd(&hist[(p >> shift) & 0xFF], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned above = 0;
            int b = 255;
            for (; b > 0; b--) {
                if (above + hist[b] >= remaining) break;
                above += hist[b];
            }
            chosen_prefix = prefix | ((u64)b << shift);
            chosen_remaining = remaining - above;
        }
        __syncthreads();
        prefix = chosen_prefix;
        remaining = chosen_remaining;
        mask |= 0xFFull << shift;
        __syncthreads();
    }
    if (threadIdx.x == 0) num_cand = 0;
    __syncthreads();
    for (int j = threadIdx.x; j < cols; j += PICK_THREADS) {
        const u64 p = pick_pack(key(r[j]), j);
        if (p >= prefix) cand[atomicAdd(&num_cand, 1u)] = p;
    }
    __syncthreads();
    for (unsigned i = threadIdx.x; i < k; i += PICK_THREADS) {
        const u64 p = cand[i];
        unsigned rank = 0;
        for (unsigned m = 0; m < k; m++) rank += cand[m] > p ? 1u : 0u;
        const unsigned id = pick_index(p);
        o[2 * rank] = id;
        o[2 * rank + 1] = __float_as_uint(r[id]);
    }
}

// The ks[b] best candidates of row rows[b] in total order (`f32::total_cmp`, ties by lower
// index), best first, as (index, value bits) pairs at out + b * 2 * PICK_MAX_K.
extern "C" __global__ void __launch_bounds__(PICK_THREADS) pick_top_k(const float* __restrict__ logits,
                                                                      const unsigned* __restrict__ rows,
                                                                      const unsigned* __restrict__ ks, int cols,
                                                                      unsigned* __restrict__ out) { TL_BLOCK();
    PDL_ENTRY();
    const float* r = logits + (u64)rows[blockIdx.x] * cols;
    const unsigned k = min(min(ks[blockIdx.x], (unsigned)cols), (unsigned)PICK_MAX_K);
    top_k_of_row<total_key>(r, cols, k, out + (u64)blockIdx.x * 2 * PICK_MAX_K);
}

// Block-wide reduction of one double per thread in a fixed order (lanes by xor shuffles, then
// the warps' results in warp order); every thread gets the result. `op`: 0 sum, 1 max.
__device__ double block_reduce_f64(double v, int op) {
    __shared__ double part[PICK_THREADS / 32];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const double o = __shfl_xor_sync(0xffffffffu, v, off);
        v = op ? fmax(v, o) : v + o;
    }
    __syncthreads();  // `part` may still be read by a previous call
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    double m = part[0];
    for (int i = 1; i < PICK_THREADS / 32; i++) m = op ? fmax(m, part[i]) : m + part[i];
    return m;
}

// Log-probabilities (crates/core/src/logprobs.rs is the definition): entry b is (row, token, n)
// at meta + 3b. Out, per entry at out + b * (4 + 2 * PICK_MAX_K) words: the row's log-sum-exp
// (a double: max + log Σ exp(v − max), both in float64, the sum in this kernel's fixed order),
// the token's logit bits, then its n best (index, value bits) by the definition's order (`>`, +0
// and −0 equal, NaN last, ties by lower index — the argmax key). A function of the row alone.
extern "C" __global__ void __launch_bounds__(PICK_THREADS) row_logprobs(const float* __restrict__ logits,
                                                                        const unsigned* __restrict__ meta, int cols,
                                                                        unsigned* __restrict__ out) { TL_BLOCK();
    PDL_ENTRY();
    const unsigned* m = meta + 3 * (u64)blockIdx.x;
    const float* r = logits + (u64)m[0] * cols;
    unsigned* o = out + (u64)blockIdx.x * (4 + 2 * PICK_MAX_K);
    double mx = __longlong_as_double(0xfff0000000000000ull);  // -inf
    for (int j = threadIdx.x; j < cols; j += PICK_THREADS) mx = fmax(mx, (double)r[j]);
    mx = block_reduce_f64(mx, 1);
    double sum = 0.0;
    for (int j = threadIdx.x; j < cols; j += PICK_THREADS) sum += exp((double)r[j] - mx);
    sum = block_reduce_f64(sum, 0);
    if (threadIdx.x == 0) {
        const double lse = mx + log(sum);
        const unsigned long long bits = (unsigned long long)__double_as_longlong(lse);
        o[0] = (unsigned)(bits & 0xFFFFFFFFull);
        o[1] = (unsigned)(bits >> 32);
        o[2] = __float_as_uint(r[m[1]]);
    }
    const unsigned k = min(min(m[2], (unsigned)cols), (unsigned)PICK_MAX_K);
    if (k > 0) top_k_of_row<argmax_key>(r, cols, k, o + 4);
}
