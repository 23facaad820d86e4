// Paged causal grouped-query attention on the f32 CUDA cores (f16/bf16 stores at head sizes 64, 96
// and 128 take the tensor-core kernels of attention_mma.cu instead): prefill, decode and verify
// rows alike in one launch; one kernel per head size (`attention_64`, ...), so every per-lane
// array is sized at compile time.
//
// The canonical arithmetic of one (row, head) at absolute position p, fixed by the model's shapes:
// positions 0..=p are cut into tiles at absolute multiples of ATT_TILE (64), each tile a split of
// its own (ATT_SPLIT = 64). Score of position j: one fmaf chain over the
// head's dims in ascending order (q, and k as stored: f32, or f16/bf16 widened exactly), times
// `scale`.
// Inside a split, tiles are taken in ascending order with an online softmax: tile max (exact),
// running max m, alpha = exp(m_old - m), exponentials exp(s - m), the tile's sum by the xor
// butterfly over lanes (lane i first adds its two positions i and i + 32), l = l * alpha + tile
// sum, and acc[d] = acc[d] * alpha followed by one fmaf per position in ascending order. Splits
// merge into the total by a left fold in split order (both sides rescaled to the larger max), and
// the output is acc / l once at the end. Positions past p never count (their scores are dropped),
// so the result depends only on p and the cached K/V, never on other rows, chunking or history.
//
// The decomposition (free: it changes no rounding). A block takes one KV head and up to
// `rows_per_block` consecutive rows; rows that share a block table (a prefill chunk of one lane)
// walk the KV tiles together, so a tile is read from memory once for all their heads of the group.
// Each tile's K and then V are staged in shared memory by cp.async (V's copy overlaps the scores,
// the next K's the P·V). Each warp owns up to ATT_PAIRS (row, head) pairs and keeps their softmax
// state in registers; a walk serves 4 * ATT_PAIRS pairs, and more pairs take more walks. Given
// `part` (decode: one row per block), block z of the grid's third dimension takes split z only
// and writes its (acc, m, l) there, and the last of a row's split blocks to finish (`arrivals`;
// without them `attention_merge`, a launch of its own) folds each (row, head)'s splits in order
// with the walk's arithmetic (`merge_splits`): the same bits, with a decode row's tiles walked by
// as many blocks at once instead of one after another.

#define ATT_TILE 64
#define ATT_SPLIT 64
#define ATT_WARPS 4
#define ATT_PAIRS 4
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// Stores each row's K and V at its slot, rounded to the cache's element type.
template <int ST>
__device__ __forceinline__ void write_kv_body(const float* __restrict__ k, const float* __restrict__ v,
                                              const u32* __restrict__ slots, u8* __restrict__ k_cache,
                                              u8* __restrict__ v_cache, int num_rows, int len) {
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (u64)num_rows * len) return;
    const u64 row = i / len, j = i % len;
    const u64 at = ((u64)slots[row] * len + j) * Kv<ST>::BYTES;
    Kv<ST>::store(k_cache + at, k[i]);
    Kv<ST>::store(v_cache + at, v[i]);
}

// One cache tile (positions t0..t0+63, clamped to `last`) of one KV head into shared memory rows
// of `stride` bytes: 16-byte pieces, issued by the whole block as one cp.async group.
template <int HD, int ST>
__device__ __forceinline__ void att_stage(u8* dst, int stride, const u8* __restrict__ cache, u64 row_stride,
                                          u64 base, const u32* __restrict__ table, int block_size, int t0, int last) {
    constexpr int PIECES = HD * Kv<ST>::BYTES / 16;
    for (int i = threadIdx.x; i < ATT_TILE * PIECES; i += ATT_WARPS * 32) {
        const int j = i / PIECES, c = i % PIECES;
        const int pos = min(t0 + j, last);
        const u64 slot = (u64)table[pos / block_size] * (u64)block_size + (u64)(pos % block_size);
        cp_async16(dst + j * stride + 16 * c, cache + (slot * row_stride + base) * Kv<ST>::BYTES + 16 * c, true);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

// Shared memory of one block (bytes): K tile [64][HD * BYTES + 16], V tile [64][HD * BYTES], the
// f32 q of a walk's pairs.
__host__ __device__ constexpr int att_smem_bytes(int hd, int bytes) {
    return ATT_TILE * (hd * bytes + 16) + ATT_TILE * hd * bytes + 4 * 4 * ATT_PAIRS * hd;
}

// The index of flat element c (of rows of a multiple of 32 columns) in its k-permuted bf16 copy,
// as round_bf16 lays it out (`kperm`).
__device__ __forceinline__ u64 xb_index(u64 c) { return (c / 32) * 32 + kperm((int)(c % 32)); }

// One (row, head) pair's `splits` split states (HD + 2 floats each, from `pr`) folded in split
// order as the walk folds them, then out = total / l, at flat element `at` of out (and of its
// rounded copy `xb`, when given): lane i of a warp takes dims i, i + 32, ... (head_dim <= 256).
// Every dim's fold is its own chain, so which thread runs it changes no bit. The states are read
// from L2 (`__ldcg`): another block of the same launch may have written them.
__device__ __forceinline__ void merge_splits(const float* __restrict__ pr, int splits, int head_dim, int lane,
                                             float* __restrict__ out, unsigned short* __restrict__ xb, u64 at) {
    float m_tot = NEG_INF, l_tot = 0.0f, tot[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
    for (int z = 0; z < splits; z++) {
        const float* ps = pr + (u64)z * (head_dim + 2);
        const float m_s = __ldcg(ps + head_dim), l_s = __ldcg(ps + head_dim + 1);
        const float m = fmaxf(m_tot, m_s);
        const float a_tot = expf(m_tot - m), a_s = expf(m_s - m);
        l_tot = __fadd_rn(__fmul_rn(l_tot, a_tot), __fmul_rn(l_s, a_s));
#pragma unroll
        for (int i = 0; i < 8; i++)
            if (lane + 32 * i < head_dim)
                tot[i] = __fadd_rn(__fmul_rn(tot[i], a_tot), __fmul_rn(__ldcg(ps + lane + 32 * i), a_s));
        m_tot = m;
    }
#pragma unroll
    for (int i = 0; i < 8; i++)
        if (lane + 32 * i < head_dim) {
            const float y = __fdiv_rn(tot[i], l_tot);
            out[at + lane + 32 * i] = y;
            if (xb) xb[xb_index(at + lane + 32 * i)] = (unsigned short)bf16_bits(y);
        }
}

// The end of a split decode launch (either attention kernel): this block has written its splits'
// states of rows r_begin..r_end; the last of the gridDim.z blocks of its (rows, KV head) to arrive
// (`arrivals`, one counter per such block, zero between launches: the last resets it) folds every
// split of those rows' pairs in order (`merge_splits`, attention_merge's arithmetic: the same
// bits) and writes out, so no merge launch follows the attention.
__device__ __noinline__ void att_fold_splits(const float* __restrict__ part, const u32* __restrict__ meta,
                                             int num_heads, int group, int kv_head, int r_begin, int r_end,
                                             int head_dim, int num_splits, int split_len, float* __restrict__ out,
                                             unsigned short* __restrict__ xb, u32* arrivals) {
    __shared__ u32 ticket;
    __syncthreads();
    u32* count = arrivals + (u64)blockIdx.x * gridDim.y + blockIdx.y;
    if (threadIdx.x == 0) ticket = fold_arrive(count);
    __syncthreads();
    if (ticket != gridDim.z - 1) return;
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int p = warp; p < (r_end - r_begin) * group; p += warps) {
        const int row = r_begin + p / group, pair = row * num_heads + kv_head * group + p % group;
        const int splits = ((int)meta[row] + split_len) / split_len;  // ceil((p + 1) / split_len)
        merge_splits(part + (u64)pair * num_splits * (head_dim + 2), splits, head_dim, lane, out, xb,
                     (u64)pair * head_dim);
    }
    if (threadIdx.x == 0) *count = 0;
}

// meta (u32): positions [num_rows], each row's offset of its block table [num_rows], tables.
template <int HD, int ST>
__device__ __forceinline__ void attention_body(const float* __restrict__ q, const u8* __restrict__ k_cache,
                                               const u8* __restrict__ v_cache, const u32* __restrict__ meta,
                                               int num_rows, int num_heads, int num_kv_heads, int block_size,
                                               float scale, float* __restrict__ out, int rows_per_block,
                                               float* __restrict__ part, int num_splits, u32* __restrict__ arrivals) {
    constexpr int ND = HD / 32;
    constexpr int E = Kv<ST>::BYTES;
    constexpr int KS = HD * E + 16;  // bytes per staged K row
    extern __shared__ __align__(16) u8 att_smem[];
    u8* ks = att_smem;
    u8* vs = ks + ATT_TILE * KS;
    float* qs = (float*)(vs + ATT_TILE * HD * E);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int group = num_heads / num_kv_heads, kv_head = blockIdx.y;
    const u64 stride = (u64)num_kv_heads * HD, base = (u64)kv_head * HD;
    const int r_end = min((int)(blockIdx.x + 1) * rows_per_block, num_rows);

    // Runs of consecutive rows with one block table; each run's pairs in walks of 4 * ATT_PAIRS.
    for (int r0 = blockIdx.x * rows_per_block; r0 < r_end;) {
        const u32 toff = meta[num_rows + r0];
        int r1 = r0 + 1;
        while (r1 < r_end && meta[num_rows + r1] == toff) r1++;
        const u32* table = meta + 2 * num_rows + toff;
        const int num_pairs = (r1 - r0) * group;
        for (int p0 = 0; p0 < num_pairs; p0 += 4 * ATT_PAIRS) {
            const int p_end = min(p0 + 4 * ATT_PAIRS, num_pairs);
            // The walk covers its rows' longest context.
            int ctx_max = 0;
            for (int r = r0 + p0 / group; r <= r0 + (p_end - 1) / group; r++) ctx_max = max(ctx_max, (int)meta[r] + 1);
            // The positions this block walks: all, or split z's.
            const int t_begin = part ? (int)blockIdx.z * ATT_SPLIT : 0;
            const int t_end = part ? min(ctx_max, t_begin + ATT_SPLIT) : ctx_max;
            if (t_begin >= t_end) continue;  // block-uniform: no split z for these rows

            // This warp's pairs: p0 + warp + 4 * i.
            int ctx[ATT_PAIRS], row[ATT_PAIRS], head[ATT_PAIRS];
            float m_tot[ATT_PAIRS], l_tot[ATT_PAIRS], acc_tot[ATT_PAIRS][ND];
            float m_s[ATT_PAIRS], l_s[ATT_PAIRS], acc_s[ATT_PAIRS][ND], e[ATT_PAIRS][2];
#pragma unroll
            for (int i = 0; i < ATT_PAIRS; i++) {
                const int p = p0 + warp + 4 * i;
                row[i] = r0 + p / group;
                head[i] = kv_head * group + p % group;
                ctx[i] = p < p_end ? (int)meta[row[i]] + 1 : 0;
                m_tot[i] = m_s[i] = NEG_INF;
                l_tot[i] = l_s[i] = 0.0f;
#pragma unroll
                for (int d = 0; d < ND; d++) acc_tot[i][d] = acc_s[i][d] = 0.0f;
                if (ctx[i] > 0) {
                    const float* qh = q + ((u64)row[i] * num_heads + head[i]) * HD;
#pragma unroll
                    for (int d = 0; d < ND; d++) qs[(warp + 4 * i) * HD + 32 * d + lane] = qh[32 * d + lane];
                }
            }
            att_stage<HD, ST>(ks, KS, k_cache, stride, base, table, block_size, t_begin, ctx_max - 1);
            for (int t0 = t_begin; t0 < t_end; t0 += ATT_TILE) {
                asm volatile("cp.async.wait_group 0;\n" ::);
                __syncthreads();  // K of this tile is in; every warp is done with the last V tile
                att_stage<HD, ST>(vs, HD * E, v_cache, stride, base, table, block_size, t0, ctx_max - 1);
#pragma unroll
                for (int i = 0; i < ATT_PAIRS; i++) {
                    if (t0 >= ctx[i]) continue;
                    // Both scores as two independent fmaf chains over ascending dims.
                    float dot[2] = {0.0f, 0.0f};
                    const float4* q4 = (const float4*)(qs + (warp + 4 * i) * HD);
                    const u8* k0 = ks + lane * KS;
                    const u8* k1 = ks + (lane + 32) * KS;
#pragma unroll 8
                    for (int d = 0; d < HD / 4; d++) {
                        const float4 qv = q4[d], a = Kv<ST>::load4(k0 + 4 * E * d), b = Kv<ST>::load4(k1 + 4 * E * d);
                        dot[0] = fmaf(qv.x, a.x, dot[0]);
                        dot[0] = fmaf(qv.y, a.y, dot[0]);
                        dot[0] = fmaf(qv.z, a.z, dot[0]);
                        dot[0] = fmaf(qv.w, a.w, dot[0]);
                        dot[1] = fmaf(qv.x, b.x, dot[1]);
                        dot[1] = fmaf(qv.y, b.y, dot[1]);
                        dot[1] = fmaf(qv.z, b.z, dot[1]);
                        dot[1] = fmaf(qv.w, b.w, dot[1]);
                    }
                    float s[2];
#pragma unroll
                    for (int h = 0; h < 2; h++) s[h] = (t0 + 32 * h + lane < ctx[i]) ? __fmul_rn(dot[h], scale) : NEG_INF;
                    const float m_new = fmaxf(m_s[i], warp_max(fmaxf(s[0], s[1])));
                    const float alpha = expf(m_s[i] - m_new);
#pragma unroll
                    for (int h = 0; h < 2; h++) e[i][h] = (t0 + 32 * h + lane < ctx[i]) ? expf(s[h] - m_new) : 0.0f;
                    l_s[i] = __fadd_rn(__fmul_rn(l_s[i], alpha), warp_sum(__fadd_rn(e[i][0], e[i][1])));
#pragma unroll
                    for (int d = 0; d < ND; d++) acc_s[i][d] = __fmul_rn(acc_s[i][d], alpha);
                    m_s[i] = m_new;
                }
                __syncthreads();  // every warp is done with this K tile
                if (t0 + ATT_TILE < t_end) {
                    att_stage<HD, ST>(ks, KS, k_cache, stride, base, table, block_size, t0 + ATT_TILE, ctx_max - 1);
                    asm volatile("cp.async.wait_group 1;\n" ::);
                } else {
                    asm volatile("cp.async.wait_group 0;\n" ::);
                }
                __syncthreads();  // V of this tile is in
#pragma unroll
                for (int i = 0; i < ATT_PAIRS; i++) {
                    if (t0 >= ctx[i]) continue;
                    const int tlen = min(ATT_TILE, ctx[i] - t0);
                    // P·V in ascending positions.
#pragma unroll 8
                    for (int j = 0; j < tlen; j++) {
                        const float p = __shfl_sync(0xffffffffu, j < 32 ? e[i][0] : e[i][1], j % 32);
                        const u8* vr = vs + j * HD * E;
#pragma unroll
                        for (int d = 0; d < ND; d++)
                            acc_s[i][d] = fmaf(p, Kv<ST>::load1(vr + (32 * d + lane) * E), acc_s[i][d]);
                    }
                    if ((t0 + ATT_TILE) % ATT_SPLIT == 0 || t0 + ATT_TILE >= ctx[i]) {
                        if (part) {
                            // This split's state, for the fold.
                            float* pr = part + (((u64)row[i] * num_heads + head[i]) * num_splits + blockIdx.z) * (HD + 2);
#pragma unroll
                            for (int d = 0; d < ND; d++) pr[32 * d + lane] = acc_s[i][d];
                            if (lane == 0) {
                                pr[HD] = m_s[i];
                                pr[HD + 1] = l_s[i];
                            }
                            continue;
                        }
                        const float m = fmaxf(m_tot[i], m_s[i]);
                        const float a_tot = expf(m_tot[i] - m), a_s = expf(m_s[i] - m);
                        l_tot[i] = __fadd_rn(__fmul_rn(l_tot[i], a_tot), __fmul_rn(l_s[i], a_s));
#pragma unroll
                        for (int d = 0; d < ND; d++) {
                            acc_tot[i][d] = __fadd_rn(__fmul_rn(acc_tot[i][d], a_tot), __fmul_rn(acc_s[i][d], a_s));
                            acc_s[i][d] = 0.0f;
                        }
                        m_tot[i] = m;
                        m_s[i] = NEG_INF;
                        l_s[i] = 0.0f;
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < ATT_PAIRS; i++) {
                if (ctx[i] == 0 || part) continue;
                float* oh = out + ((u64)row[i] * num_heads + head[i]) * HD;
#pragma unroll
                for (int d = 0; d < ND; d++) oh[32 * d + lane] = __fdiv_rn(acc_tot[i][d], l_tot[i]);
            }
            __syncthreads();  // the next walk restages q and the tiles
        }
        r0 = r1;
    }
    // Given `arrivals`, the last of a row's split blocks folds the splits (no merge launch).
    if (part && arrivals)
        att_fold_splits(part, meta, num_heads, group, kv_head, blockIdx.x * rows_per_block, r_end, HD, num_splits,
                        ATT_SPLIT, out, nullptr, arrivals);
}

#define ATTENTION_KERNEL(HD, NAME, ST)                                                                   \
    extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32)                                            \
        attention_##HD##_##NAME(const float* q, const u8* k_cache, const u8* v_cache, const u32* meta,     \
                                int num_rows, int num_heads, int num_kv_heads, int block_size, float scale, \
                                float* out, int rows_per_block, float* part, int num_splits,                \
                                u32* arrivals) { TL_BLOCK();                                                            \
        PDL_ENTRY();                                                                                        \
        attention_body<HD, ST>(q, k_cache, v_cache, meta, num_rows, num_heads, num_kv_heads, block_size,    \
                               scale, out, rows_per_block, part, num_splits, arrivals);                     \
    }
#define ATTENTION_KERNELS(HD)            \
    ATTENTION_KERNEL(HD, f32, KV_F32)   \
    ATTENTION_KERNEL(HD, f16, KV_F16)   \
    ATTENTION_KERNEL(HD, bf16, KV_BF16)
ATTENTION_KERNELS(32)
ATTENTION_KERNELS(64)
ATTENTION_KERNELS(96)
ATTENTION_KERNELS(128)
ATTENTION_KERNELS(160)
ATTENTION_KERNELS(192)
ATTENTION_KERNELS(224)
ATTENTION_KERNELS(256)

// The splits' states of each (row, head), folded in split order as the walk folds them
// (`merge_splits`), as a launch of its own after the f32 kernel: only with
// PLUMB_CUDA_ATT_MERGE_LAUNCH=1, for measuring; by default the last split block folds them
// (`att_fold_splits`), as the tensor-core kernel's always does. One warp per (row, head).
extern "C" __global__ void attention_merge(const float* __restrict__ part, const u32* __restrict__ meta, int num_rows,
                                           int num_heads, int head_dim, int num_splits, int split_len,
                                           float* __restrict__ out) { TL_BLOCK();
    PDL_ENTRY();
    const int pair = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (pair >= num_rows * num_heads) return;
    const int row = pair / num_heads;
    const int splits = ((int)meta[row] + split_len) / split_len;  // ceil((p + 1) / split_len)
    merge_splits(part + (u64)pair * num_splits * (head_dim + 2), splits, head_dim, lane, out, nullptr,
                 (u64)pair * head_dim);
}

// `rope_qk` (elementwise.cu) of q and k, then `write_kv` of the rotated k and v, in one launch:
// threads below q's pair count rotate a pair of q; the rest take a pair of dims (a, b) of one k
// head — a rotated pair (the layout's, with rope_qk's arithmetic) or two of the dims past the
// rotated ones, left as they are — write the rotated k back (as rope_qk would) and store k's
// and v's elements a and b at the row's slot (as write_kv would). The bits of the three
// launches apart. head_dim is even.
template <int ST>
__device__ __forceinline__ void rope_write_kv_body(float* __restrict__ q, float* __restrict__ k,
                                                   const float* __restrict__ v, const float* __restrict__ table,
                                                   const u32* __restrict__ slots, u8* __restrict__ k_cache,
                                                   u8* __restrict__ v_cache, int num_rows, int half, int q_heads,
                                                   int k_heads, int head_dim, int rotate_half) {
    u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 nq = (u64)num_rows * q_heads * half, pairs = head_dim / 2;
    if (t >= nq + (u64)num_rows * k_heads * pairs) return;
    const bool is_q = t < nq;
    if (!is_q) t -= nq;
    const u64 per_head = is_q ? half : pairs;
    const int heads = is_q ? q_heads : k_heads;
    const int p = (int)(t % per_head), head = (int)((t / per_head) % heads), row = (int)(t / (per_head * heads));
    float* h = (is_q ? q : k) + (u64)row * heads * head_dim + (u64)head * head_dim;
    const int a = p < half && rotate_half ? p : 2 * p, b = p < half && rotate_half ? p + half : 2 * p + 1;
    if (p < half) {
        const float c = table[(u64)row * 2 * half + p], s = table[(u64)row * 2 * half + half + p];
        const float x0 = h[a], x1 = h[b];
        if (rotate_half) {
            h[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
            h[b] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
        } else {
            h[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
            h[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
        }
    }
    if (is_q) return;
    const u64 len = (u64)k_heads * head_dim, j = (u64)head * head_dim;
    const u64 at = (u64)slots[row] * len + j, from = (u64)row * len + j;
    Kv<ST>::store(k_cache + (at + a) * Kv<ST>::BYTES, h[a]);
    Kv<ST>::store(k_cache + (at + b) * Kv<ST>::BYTES, h[b]);
    Kv<ST>::store(v_cache + (at + a) * Kv<ST>::BYTES, v[from + a]);
    Kv<ST>::store(v_cache + (at + b) * Kv<ST>::BYTES, v[from + b]);
}

#define WRITE_KV_KERNEL(NAME, ST)                                                                          \
    extern "C" __global__ void write_kv_##NAME(const float* k, const float* v, const u32* slots, u8* k_cache, \
                                               u8* v_cache, int num_rows, int len) { TL_BLOCK(); PDL_ENTRY();                       \
        write_kv_body<ST>(k, v, slots, k_cache, v_cache, num_rows, len);                                    \
    }                                                                                                     \
    extern "C" __global__ void rope_write_kv_##NAME(float* q, float* k, const float* v, const float* table,   \
                                                    const u32* slots, u8* k_cache, u8* v_cache, int num_rows, \
                                                    int half, int q_heads, int k_heads, int head_dim,         \
                                                    int rotate_half) { TL_BLOCK();                                        \
        PDL_ENTRY();                                                                                      \
        rope_write_kv_body<ST>(q, k, v, table, slots, k_cache, v_cache, num_rows, half, q_heads, k_heads,  \
                               head_dim, rotate_half);                                                    \
    }
WRITE_KV_KERNEL(f32, KV_F32)
WRITE_KV_KERNEL(f16, KV_F16)
WRITE_KV_KERNEL(bf16, KV_BF16)
