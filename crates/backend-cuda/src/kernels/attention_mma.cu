// Paged causal grouped-query attention on the tensor cores, for K/V stored as f16 or bf16
// (`attention_mma_{64,96,128}_{f16,bf16}`); the same rows, metadata and launch as attention.cu.
//
// Precision: f32 class, no new declared rounding. The tensor cores multiply 16-bit operands, and
// K and V already are 16-bit as stored; q and the softmax weights p are not, so each enters as a
// sum of pieces of the store's type, each piece rounding what the earlier ones left (exact f32
// subtractions): 2 f16 pieces (22 significant bits) or 3 bf16 pieces (24). The products of the
// pieces add up in the f32 accumulators, so a score and a weighted sum carry errors of f32 size
// and the conformance bound of attention.cu holds unchanged. (An f16 piece overflows past 65,504,
// as the f16 store itself does.)
//
// The canonical arithmetic of one (row, head) at absolute position p (tiles of ATT_TILE and
// splits of `split_len` positions at absolute multiples, a multiple of ATT_TILE fixed per backend
// (`PLUMB_CUDA_ATM_SPLIT`, default 256); its own form, not attention.cu's):
// - Scores of a tile: for each 8 positions, one chain of mma m16n8k16 steps onto a zero f32
//   accumulator, over the head's 16-dim steps in ascending order, q's pieces in order within a
//   step; times `scale`. An mma output element depends on its own row and column only.
// - Softmax: tile max (exact), m = max(m, tile max), alpha = exp(m_old - m), e = exp(s - m) (0 for
//   positions past p), the tile's sum: this thread's 16 e in position order, then the quad's
//   butterfly (xor 1, xor 2); l = l * alpha + sum.
// - Output: acc = acc * alpha, then for each 16 positions in ascending order, the mma steps of
//   e's pieces in order with V, accumulating onto acc.
// - Splits merge into the total by the left fold of attention.cu, at the split's end or at the
//   row's last tile; out = total / l.
// Everything a row computes depends on its own q, p and the cached K/V: the rows sharing an
// mma (a GQA group, a prefill chunk's rows) or a walk change no bit of it.
//
// The decomposition: a block takes one KV head and up to `rows_per_block` consecutive rows (the
// longest rows' blocks first); each walk covers 64 (row, head) pairs, 16 per warp (the m16 of
// the mma). A walk takes all of its rows' splits in order and folds them as it goes; or, given
// `part` (decode: one row per block), block z of the grid's third dimension takes walk z only
// (`walk_len` positions, one or more whole splits) and writes each split's (acc, m, l) there,
// starting each split afresh as a block of one split would; the last of those blocks to finish
// folds the splits of each (row, head) in order with the same arithmetic (`att_fold_splits`): the
// same bits either way, and no merge launch. Given `xb`, out is also written as round_bf16 makes
// it (the copy the o projection's tensor-core weight takes: no rounding launch). K and V tiles are staged by
// cp.async into two buffers, the next tile's copy overlapping all of this tile's work (one block
// barrier per tile), by the warps that hold no pair of the walk where there are any (`atm_stagers`:
// a decode row's group leaves three of four idle), rows padded by 16 bytes so ldmatrix reads hit distinct banks; each warp keeps
// its q pieces in shared memory. A block may be one warp (decode rows, whose pairs fit one m16
// tile, on many blocks: `attention_plan.rs`): it keeps one tile buffer, copying the next tile
// after this one's work, so four or five blocks fit an SM and overlap each other's copies instead.

#define ATM_WARPS 4
#define ATM_M 16

template <int ST> struct Mma16;
template <> struct Mma16<KV_F16> {
    static constexpr int PIECES = 2;
    __device__ static u32 round(float x) {
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
        return h;
    }
    __device__ static float widen(u32 h) { return half_bits_f32((unsigned short)h); }
    __device__ static void mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};
template <> struct Mma16<KV_BF16> {
    static constexpr int PIECES = 3;
    __device__ static u32 round(float x) { return bf16_bits(x); }
    __device__ static float widen(u32 h) { return __uint_as_float(h << 16); }
    __device__ static void mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
        mma_bf16(d, a[0], a[1], a[2], a[3], b0, b1);
    }
};

// Two values split into pieces, packed pairwise: word i holds piece i of x (low half) and of y.
template <int ST>
__device__ __forceinline__ void split_pair(float x, float y, u32 (&w)[Mma16<ST>::PIECES]) {
#pragma unroll
    for (int i = 0; i < Mma16<ST>::PIECES; i++) {
        const u32 a = Mma16<ST>::round(x), b = Mma16<ST>::round(y);
        w[i] = a | b << 16;
        x = __fsub_rn(x, Mma16<ST>::widen(a));
        y = __fsub_rn(y, Mma16<ST>::widen(b));
    }
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// Shared memory of one block (bytes): the K and V tiles (two buffers of each, one in a one-warp
// block) and each warp's q pieces, rows of HD * 2 + 16 bytes.
__host__ __device__ constexpr int atm_smem_bytes(int hd, int pieces, int warps) {
    return ((warps == 1 ? 2 : 4) * ATT_TILE + warps * pieces * ATM_M) * (hd * 2 + 16);
}

// One cache tile of K and of V (positions t0..t0+63, clamped to `last`) of one KV head into
// shared rows of `rs` bytes, 16-byte pieces issued by the block's staging threads (the last
// `stagers` of the block, whole warps: `atm_stagers`) as one cp.async group. Each position's slot
// (its byte offset in the cache) is found once, by one thread, into `slots` (the block's ATT_TILE
// of them in shared memory), with shifts where the KV block size is a power of two; the copies
// then read it from there: a position's 2 · HD / 16 pieces (and a lane's 32 in a one-warp block)
// no longer each read the block table and redo the address. The caller's barrier since the last
// staging makes `slots` free. Only where bytes land: no arithmetic of the form.
// With CORE (attention_wgmma.cu), the tiles are wgmma core matrices instead of padded rows:
// piece c (dims 8 c .. 8 c + 7) of position j at c · 1,024 + j · 16 bytes, consecutive threads
// taking consecutive positions of one piece (8 threads fill 128 contiguous bytes); `rs` unused.
template <int HD, bool CORE = false>
__device__ __forceinline__ void atm_stage_kv(u8* kdst, u8* vdst, int rs, const u8* __restrict__ k_cache,
                                             const u8* __restrict__ v_cache, u64 row_stride, u64 base,
                                             const u32* __restrict__ table, int block_size, int t0, int last,
                                             u64* slots, int stagers) {
    constexpr int PIECES = HD * 2 / 16;
    const bool pow2 = (block_size & (block_size - 1)) == 0;
    const int shift = __ffs(block_size) - 1;
    const int me = (int)threadIdx.x - ((int)blockDim.x - stagers);  // this thread among the stagers
    for (int j = me; j < ATT_TILE; j += stagers) {
        const int pos = min(t0 + j, last);
        const int blk = pow2 ? pos >> shift : pos / block_size;
        const int off = pow2 ? pos & (block_size - 1) : pos - blk * block_size;
        slots[j] = (((u64)table[blk] * (u64)block_size + (u64)off) * row_stride + base) * 2;
    }
    if (stagers == (int)blockDim.x)
        __syncthreads();
    else  // named barrier 1: the stagers alone (the other warps are computing)
        asm volatile("bar.sync 1, %0;\n" ::"r"(stagers) : "memory");
    const u32 kd = smem_addr(kdst), vd = smem_addr(vdst);
#pragma unroll 4
    for (int i = me; i < ATT_TILE * PIECES; i += stagers) {
        const int j = CORE ? i % ATT_TILE : i / PIECES, c = CORE ? i / ATT_TILE : i % PIECES;
        const u64 at = slots[j] + 16 * c;
        const u32 to = CORE ? c * ATT_TILE * 16 + j * 16 : j * rs + 16 * c;
        cp_async16_at(kd + to, k_cache + at, true);
        cp_async16_at(vd + to, v_cache + at, true);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

// Threads that stage a walk of `pairs` (row, head) pairs' K/V tiles in a block of `warps`: the
// warps that hold none of its pairs, when there are any, else the whole block. A decode row's GQA
// group fills one warp's m16 tile at most and leaves the other three idle; the copies' ~260
// instructions a tile then leave the one computing warp's chain, on which a one-request decode
// walk spends ~1,150 instructions a tile at ~6 cycles each (Nsight Compute, session 24). Block-
// uniform; only who issues the copies.
__device__ __forceinline__ int atm_stagers(int pairs, int warps) {
    const int busy = (pairs + ATM_M - 1) / ATM_M;
    return (busy < warps ? warps - busy : warps) * 32;
}

// The longest context among a walk's pairs p0 .. p_end - 1 (rows of `group` heads from r0).
__device__ __forceinline__ int atm_walk_ctx(const u32* __restrict__ meta, int r0, int p0, int p_end, int group) {
    int ctx_max = 0;
    for (int r = r0 + p0 / group; r <= r0 + (p_end - 1) / group; r++) ctx_max = max(ctx_max, (int)meta[r] + 1);
    return ctx_max;
}

// This thread's rows of its warp's m16 tile, pairs p and p + 8 of the walk (rows g and g + 8):
// each one's row, head and context (0 for a pair at or past `p_end`).
__device__ __forceinline__ void atm_pair_rows(const u32* __restrict__ meta, int p, int p_end, int r0, int group,
                                              int kv_head, int (&ctx)[2], int (&row)[2], int (&head)[2]) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        row[h] = r0 + (p + 8 * h) / group;
        head[h] = kv_head * group + (p + 8 * h) % group;
        ctx[h] = p + 8 * h < p_end ? (int)meta[row[h]] + 1 : 0;
    }
}

// q's pieces of a warp's 16 (row, head) pairs from `pair0` (zeros for pairs at or past `p_end`),
// piece c of pair m's dims d, d + 1 written as one word at at(m, d, c): the layout is the kernel's
// (padded rows for ldmatrix, core matrices for wgmma). A lane's loads go out Q_BATCH at a time
// before any is used: one wait on L2 a batch, not one a load (q was just written by the launch
// before). Only where bytes land: no arithmetic of the form.
template <int HD, int ST, typename At>
__device__ __forceinline__ void atm_load_q(const float* __restrict__ q, int pair0, int p_end, int r0, int group,
                                           int num_heads, int kv_head, int lane, At at) {
    constexpr int P = Mma16<ST>::PIECES;
    constexpr int Q_LOADS = ATM_M * HD / 2 / 32, Q_BATCH = 8;
    static_assert(Q_LOADS % Q_BATCH == 0, "q's loads come in whole batches");
#pragma unroll 1
    for (int k0 = 0; k0 < Q_LOADS; k0 += Q_BATCH) {
        float2 x[Q_BATCH];
#pragma unroll
        for (int b = 0; b < Q_BATCH; b++) {
            const int i = lane + 32 * (k0 + b), m = i / (HD / 2), d = 2 * (i % (HD / 2));
            const int p = pair0 + m;
            x[b] = make_float2(0.0f, 0.0f);
            if (p < p_end)
                x[b] = *(const float2*)(q + ((u64)(r0 + p / group) * num_heads + kv_head * group + p % group) * HD + d);
        }
#pragma unroll
        for (int b = 0; b < Q_BATCH; b++) {
            const int i = lane + 32 * (k0 + b), m = i / (HD / 2), d = 2 * (i % (HD / 2));
            u32 w[P];
            split_pair<ST>(x[b].x, x[b].y, w);
#pragma unroll
            for (int c = 0; c < P; c++) *(u32*)at(m, d, c) = w[c];
        }
    }
}

// The softmax of one tile: e holds this thread's unscaled scores of its warp's m16 tile (row g + 8 h
// of the tile, position t0 + 8 j + 2 t + cc in e[j][2 h + cc], the mma's C layout). Scores of
// positions past a row's p drop out; then the tile max and the new running max, e = exp(s - m),
// the tile's sum and l, and acc scaled by alpha. Each half h of the thread's elements on its own,
// in the same order (j, then position), so each sum adds its 16 e in one order; rows 8..15 only
// when `upper`.
template <int NB>
__device__ __forceinline__ void atm_softmax(float (&e)[8][4], float (&acc)[NB][4], float (&m_s)[2], float (&l_s)[2],
                                            const int (&ctx)[2], const bool (&live)[2], bool upper, int t0, int t,
                                            float scale) {
    float tmax[2] = {NEG_INF, NEG_INF}, alpha[2] = {1.0f, 1.0f}, sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (h == 1 && !upper) break;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int cc = 0; cc < 2; cc++) {
                const int c = 2 * h + cc, pos = t0 + 8 * j + 2 * t + cc;
                e[j][c] = pos < ctx[h] ? __fmul_rn(e[j][c], scale) : NEG_INF;
                tmax[h] = fmaxf(tmax[h], e[j][c]);
            }
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
        const float m_new = live[h] ? fmaxf(m_s[h], tmax[h]) : m_s[h];
        const float a = expf(m_s[h] - m_new);  // computed either way, as the e below
        alpha[h] = live[h] ? a : 1.0f;
        m_s[h] = m_new;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int cc = 0; cc < 2; cc++) {
                const int c = 2 * h + cc, pos = t0 + 8 * j + 2 * t + cc;
                // Every position's exponential, then the mask: as `p ? expf(..) : 0` the compiler
                // branched around each expf (34 divergent regions a tile, one after another);
                // computed first, the 16 are independent and overlap. A masked e is -inf, whatever
                // its expf gives is dropped, and a kept one is the same expf of the same operands:
                // the same bits.
                const float x = expf(e[j][c] - m_s[h]);
                e[j][c] = pos < ctx[h] ? x : 0.0f;
                sum[h] = __fadd_rn(sum[h], e[j][c]);
            }
        sum[h] = __fadd_rn(sum[h], __shfl_xor_sync(0xffffffffu, sum[h], 1));
        sum[h] = __fadd_rn(sum[h], __shfl_xor_sync(0xffffffffu, sum[h], 2));
        if (live[h]) l_s[h] = __fadd_rn(__fmul_rn(l_s[h], alpha[h]), sum[h]);
#pragma unroll
        for (int n = 0; n < NB; n++)
#pragma unroll
            for (int cc = 0; cc < 2; cc++) acc[n][2 * h + cc] = __fmul_rn(acc[n][2 * h + cc], alpha[h]);
    }
}

// e of positions 16 s .. 16 s + 15 as the A fragments (m16 x k16, the mma's A layout) of each
// piece. Rows 8..15 hold no pair unless `upper`: zero weights for them.
template <int ST>
__device__ __forceinline__ void atm_p_frags(const float (&e)[8][4], int s, bool upper,
                                            u32 (&pa)[Mma16<ST>::PIECES][4]) {
    constexpr int P = Mma16<ST>::PIECES;
    u32 w[P];
    split_pair<ST>(e[2 * s][0], e[2 * s][1], w);
#pragma unroll
    for (int c = 0; c < P; c++) pa[c][0] = w[c];
    split_pair<ST>(e[2 * s + 1][0], e[2 * s + 1][1], w);
#pragma unroll
    for (int c = 0; c < P; c++) pa[c][2] = w[c];
#pragma unroll
    for (int c = 0; c < P; c++) pa[c][1] = pa[c][3] = 0u;
    if (upper) {
        split_pair<ST>(e[2 * s][2], e[2 * s][3], w);
#pragma unroll
        for (int c = 0; c < P; c++) pa[c][1] = w[c];
        split_pair<ST>(e[2 * s + 1][2], e[2 * s + 1][3], w);
#pragma unroll
        for (int c = 0; c < P; c++) pa[c][3] = w[c];
    }
}

// After a tile's P·V: each live row whose split ends here (a multiple of `split_len`, or the
// row's last tile) writes the split's state for the fold (`part`; the walk's next split starts
// afresh) or folds it into its total by the left fold of attention.cu.
template <int NB>
__device__ __forceinline__ void atm_split_end(float (&acc)[NB][4], float (&tot)[NB][4], float (&m_s)[2],
                                              float (&l_s)[2], float (&m_tot)[2], float (&l_tot)[2],
                                              const int (&ctx)[2], const bool (&live)[2], const int (&row)[2],
                                              const int (&head)[2], int t0, int t, int split_len,
                                              float* __restrict__ part, int num_heads, int num_splits) {
    constexpr int HD = 8 * NB;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (!live[h] || ((t0 + ATT_TILE) % split_len != 0 && t0 + ATT_TILE < ctx[h])) continue;
        if (part) {
            float* pr = part + (((u64)row[h] * num_heads + head[h]) * num_splits + t0 / split_len) * (HD + 2);
#pragma unroll
            for (int n = 0; n < NB; n++) {
                *(float2*)(pr + 8 * n + 2 * t) = make_float2(acc[n][2 * h], acc[n][2 * h + 1]);
                acc[n][2 * h] = acc[n][2 * h + 1] = 0.0f;
            }
            if (t == 0) {
                pr[HD] = m_s[h];
                pr[HD + 1] = l_s[h];
            }
            m_s[h] = NEG_INF;
            l_s[h] = 0.0f;
            continue;
        }
        const float m = fmaxf(m_tot[h], m_s[h]);
        const float a_tot = expf(m_tot[h] - m), a_s = expf(m_s[h] - m);
        l_tot[h] = __fadd_rn(__fmul_rn(l_tot[h], a_tot), __fmul_rn(l_s[h], a_s));
#pragma unroll
        for (int n = 0; n < NB; n++)
#pragma unroll
            for (int c = 2 * h; c < 2 * h + 2; c++) {
                tot[n][c] = __fadd_rn(__fmul_rn(tot[n][c], a_tot), __fmul_rn(acc[n][c], a_s));
                acc[n][c] = 0.0f;
            }
        m_tot[h] = m;
        m_s[h] = NEG_INF;
        l_s[h] = 0.0f;
    }
}

// A walk's rows out: out = total / l, and the o projection's rounded copy where `xb` is given.
template <int NB>
__device__ __forceinline__ void atm_write_out(const float (&tot)[NB][4], const float (&l_tot)[2], const int (&ctx)[2],
                                              const int (&row)[2], const int (&head)[2], int t, int num_heads,
                                              float* __restrict__ out, unsigned short* __restrict__ xb) {
    constexpr int HD = 8 * NB;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (ctx[h] == 0) continue;
        const u64 at = ((u64)row[h] * num_heads + head[h]) * HD + 2 * t;
#pragma unroll
        for (int n = 0; n < NB; n++) {
            const float y0 = __fdiv_rn(tot[n][2 * h], l_tot[h]), y1 = __fdiv_rn(tot[n][2 * h + 1], l_tot[h]);
            *(float2*)(out + at + 8 * n) = make_float2(y0, y1);
            if (xb) *(u32*)(xb + xb_index(at + 8 * n)) = bf16_bits(y0) | bf16_bits(y1) << 16;
        }
    }
}

template <int HD, int ST>
__device__ __forceinline__ void attention_mma_body(const float* __restrict__ q, const u8* __restrict__ k_cache,
                                                   const u8* __restrict__ v_cache, const u32* __restrict__ meta,
                                                   int num_rows, int num_heads, int num_kv_heads, int block_size,
                                                   float scale, float* __restrict__ out, int rows_per_block,
                                                   float* __restrict__ part, int num_splits, int split_len,
                                                   int walk_len, unsigned short* __restrict__ xb,
                                                   u32* __restrict__ arrivals) {
    using M = Mma16<ST>;
    constexpr int P = M::PIECES;
    constexpr int RS = HD * 2 + 16;  // bytes per staged row
    constexpr int NB = HD / 8;       // 8-dim blocks of the output
    constexpr int KS = HD / 16;      // 16-dim steps of a score
    extern __shared__ __align__(16) u8 att_smem[];
    __shared__ u64 slots[ATT_TILE];  // a staged tile's positions' cache offsets (`atm_stage_kv`)
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // A block of one warp (decode rows on many blocks) keeps one buffer of the tiles, so more blocks
    // fit an SM and hide each other's copies; wider blocks keep two, the next tile's copy in flight.
    const int warps = blockDim.x / 32, bufs = warps == 1 ? 1 : 2;
    u8* kv_tiles = att_smem;                                  // buffers of [K tile][V tile]
    u8* qs = kv_tiles + bufs * 2 * ATT_TILE * RS + warp * P * ATM_M * RS;  // [piece][16 pairs][RS]
    const int g = lane / 4, t = lane % 4;
    const int group = num_heads / num_kv_heads, kv_head = blockIdx.y;
    const u64 stride = (u64)num_kv_heads * HD, base = (u64)kv_head * HD;
    const int bx = gridDim.x - 1 - blockIdx.x;
    const int r_end = min((bx + 1) * rows_per_block, num_rows);
    // ldmatrix row addresses: q's A fragments (row, k offset) and K's / V's B fragments.
    const int a_row = lane % 8 + 8 * ((lane / 8) % 2), a_col = 16 * (lane / 16);
    const int k_row = lane % 8 + 8 * (lane / 16), k_col = 16 * ((lane / 8) % 2);
    const int v_row = lane % 8 + 8 * ((lane / 8) % 2), v_col = 16 * (lane / 16);

    for (int r0 = bx * rows_per_block; r0 < r_end;) {
        const u32 toff = meta[num_rows + r0];
        int r1 = r0 + 1;
        while (r1 < r_end && meta[num_rows + r1] == toff) r1++;
        const u32* table = meta + 2 * num_rows + toff;
        const int num_pairs = (r1 - r0) * group;
        for (int p0 = 0; p0 < num_pairs; p0 += warps * ATM_M) {
            const int p_end = min(p0 + warps * ATM_M, num_pairs);
            const int ctx_max = atm_walk_ctx(meta, r0, p0, p_end, group);
            // The positions this block walks: all, or walk z's (`walk_len`, whole splits).
            const int t_begin = part ? (int)blockIdx.z * walk_len : 0;
            const int t_end = part ? min(ctx_max, t_begin + walk_len) : ctx_max;
            if (t_begin >= t_end) continue;  // block-uniform: no split z for these rows
            // The warps past the walk's pairs stage its tiles (`atm_stagers`): the last `stagers` threads.
            const int stagers = atm_stagers(p_end - p0, warps);
            const bool stager = (int)threadIdx.x >= (int)blockDim.x - stagers;

            // This thread's rows of the warp's m16 tile: pairs p0 + 16 warp + g + 8 h.
            int ctx[2], row[2], head[2];
            atm_pair_rows(meta, p0 + ATM_M * warp + g, p_end, r0, group, kv_head, ctx, row, head);
            // q's pieces into this warp's shared rows (zeros for pairs past the walk).
            atm_load_q<HD, ST>(q, p0 + ATM_M * warp, p_end, r0, group, num_heads, kv_head, lane,
                               [&](int m, int d, int c) { return qs + (c * ATM_M + m) * RS + 2 * d; });
            // Whether any of this warp's tile rows 8..15 holds a pair: a decode row's GQA group of up
            // to 8 heads leaves them empty, and their element work is skipped (a warp-uniform branch;
            // rows 0..7 depend on nothing of theirs, and their mma rows see zero weights).
            const bool upper = __any_sync(0xffffffffu, ctx[1] > 0);
            float m_s[2] = {NEG_INF, NEG_INF}, l_s[2] = {0.0f, 0.0f};
            float m_tot[2] = {NEG_INF, NEG_INF}, l_tot[2] = {0.0f, 0.0f};
            float acc[NB][4], tot[NB][4], e[8][4];
#pragma unroll
            for (int n = 0; n < NB; n++)
#pragma unroll
                for (int c = 0; c < 4; c++) acc[n][c] = tot[n][c] = 0.0f;

            if (stager)
                atm_stage_kv<HD>(kv_tiles, kv_tiles + ATT_TILE * RS, RS, k_cache, v_cache, stride, base, table,
                                 block_size, t_begin, ctx_max - 1, slots, stagers);
            for (int t0 = t_begin, it = 0; t0 < t_end; t0 += ATT_TILE, it++) {
                asm volatile("cp.async.wait_group 0;\n" ::);
                // This tile's K and V (and q's pieces) are in; every warp is done with the last tile,
                // so with two buffers the other takes the next one, whose copy overlaps all of this
                // tile's work (with one, the copy follows the work, below).
                __syncthreads();
                const u8* ks = kv_tiles + (bufs == 2 ? it & 1 : 0) * 2 * ATT_TILE * RS;
                const u8* vs = ks + ATT_TILE * RS;
                if (bufs == 2 && stager && t0 + ATT_TILE < t_end) {
                    u8* next = kv_tiles + ((it + 1) & 1) * 2 * ATT_TILE * RS;
                    atm_stage_kv<HD>(next, next + ATT_TILE * RS, RS, k_cache, v_cache, stride, base, table, block_size,
                                     t0 + ATT_TILE, ctx_max - 1, slots, stagers);
                }
                const bool live[2] = {t0 < ctx[0], t0 < ctx[1]};
                const bool warp_live = __any_sync(0xffffffffu, live[0] || live[1]);
                if (warp_live) {
#pragma unroll
                    for (int j = 0; j < 8; j++)
#pragma unroll
                        for (int c = 0; c < 4; c++) e[j][c] = 0.0f;
#pragma unroll
                    for (int kk = 0; kk < KS; kk++) {
                        u32 a[P][4];
#pragma unroll
                        for (int c = 0; c < P; c++) ldmatrix_x4(a[c], smem_addr(qs + (c * ATM_M + a_row) * RS + 32 * kk + a_col));
#pragma unroll
                        for (int jj = 0; jj < 4; jj++) {
                            u32 b[4];
                            ldmatrix_x4(b, smem_addr(ks + (16 * jj + k_row) * RS + 32 * kk + k_col));
#pragma unroll
                            for (int c = 0; c < P; c++) {
                                M::mma(e[2 * jj], a[c], b[0], b[1]);
                                M::mma(e[2 * jj + 1], a[c], b[2], b[3]);
                            }
                        }
                    }
                    atm_softmax(e, acc, m_s, l_s, ctx, live, upper, t0, t, scale);
                }
                if (warp_live) {
#pragma unroll
                    for (int s = 0; s < ATT_TILE / 16; s++) {
                        // e of positions 16 s .. 16 s + 15 as the A fragments of each piece.
                        u32 pa[P][4];
                        atm_p_frags<ST>(e, s, upper, pa);
#pragma unroll
                        for (int nn = 0; nn < HD / 16; nn++) {
                            u32 b[4];
                            ldmatrix_x4_trans(b, smem_addr(vs + (16 * s + v_row) * RS + 32 * nn + v_col));
#pragma unroll
                            for (int c = 0; c < P; c++) {
                                M::mma(acc[2 * nn], pa[c], b[0], b[1]);
                                M::mma(acc[2 * nn + 1], pa[c], b[2], b[3]);
                            }
                        }
                    }
                    atm_split_end(acc, tot, m_s, l_s, m_tot, l_tot, ctx, live, row, head, t0, t, split_len, part,
                                  num_heads, num_splits);
                }
                if (bufs == 1 && t0 + ATT_TILE < t_end) {
                    __syncthreads();  // the one buffer is read; the next tile takes it
                    atm_stage_kv<HD>(kv_tiles, kv_tiles + ATT_TILE * RS, RS, k_cache, v_cache, stride, base, table,
                                     block_size, t0 + ATT_TILE, ctx_max - 1, slots, stagers);  // one warp: all
                }
            }
            if (!part) atm_write_out(tot, l_tot, ctx, row, head, t, num_heads, out, xb);
            __syncthreads();  // the next walk restages q and the tiles
        }
        r0 = r1;
    }
    if (part) att_fold_splits(part, meta, num_heads, group, kv_head, bx * rows_per_block, r_end, HD, num_splits,
                              split_len, out, xb, arrivals);
}

#define ATTENTION_MMA_KERNEL(HD, NAME, ST)                                                                     \
    extern "C" __global__ void __launch_bounds__(ATM_WARPS * 32)                                                  \
        attention_mma_##HD##_##NAME(const float* q, const u8* k_cache, const u8* v_cache, const u32* meta,       \
                                    int num_rows, int num_heads, int num_kv_heads, int block_size, float scale,   \
                                    float* out, int rows_per_block, float* part, int num_splits, int split_len,   \
                                    int walk_len, unsigned short* xb, u32* arrivals) { TL_BLOCK();                            \
        PDL_ENTRY();                                                                                             \
        attention_mma_body<HD, ST>(q, k_cache, v_cache, meta, num_rows, num_heads, num_kv_heads, block_size,      \
                                   scale, out, rows_per_block, part, num_splits, split_len, walk_len, xb,         \
                                   arrivals);                                                                    \
    }
#define ATTENTION_MMA_KERNELS(HD)              \
    ATTENTION_MMA_KERNEL(HD, f16, KV_F16)      \
    ATTENTION_MMA_KERNEL(HD, bf16, KV_BF16)
ATTENTION_MMA_KERNELS(64)
ATTENTION_MMA_KERNELS(96)
ATTENTION_MMA_KERNELS(128)
