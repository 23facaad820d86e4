// Paged causal grouped-query attention: one warp per (row, head), prefill, decode and verify rows
// alike in one launch; one kernel per head size (`attention_64`, ...), so every per-lane array is
// sized at compile time and the loads of a tile can be issued together.
//
// The canonical arithmetic of one (row, head) at absolute position p, fixed by the model's shapes:
// positions 0..=p are cut into tiles at absolute multiples of ATT_TILE (64), tiles grouped into
// splits at absolute multiples of ATT_SPLIT (1024). Score of position j: one fmaf chain over the
// head's dims in ascending order (q from shared memory, k from the cache), times `scale`.
// Inside a split, tiles are taken in ascending order with an online softmax: tile max (exact),
// running max m, alpha = exp(m_old - m), exponentials exp(s - m), the tile's sum by the xor
// butterfly over lanes (each lane first adds its two positions), l = l * alpha + tile sum, and
// acc[d] = acc[d] * alpha followed by one fmaf per position in ascending order. Splits merge into
// the total by a left fold in split order (both sides rescaled to the larger max), and the output
// is acc / l once at the end. Positions past p are never read (causal tiles are skipped), so the
// result depends only on p and the cached K/V, never on other rows, chunking or cache history.

#define ATT_TILE 64
#define ATT_SPLIT 1024
#define ATT_WARPS 4
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

// meta (u32): positions [num_rows], each row's offset of its block table [num_rows], tables.
template <int HD>
__device__ __forceinline__ void attention_body(const float* __restrict__ q, const float* __restrict__ k_cache,
                                               const float* __restrict__ v_cache, const u32* __restrict__ meta,
                                               int num_rows, int num_heads, int num_kv_heads, int block_size,
                                               float scale, float* __restrict__ out) {
    constexpr int ND = HD / 32;
    // Positions whose V rows are loaded before their fmafs (64 values per lane in flight).
    constexpr int JU = 64 / ND < 32 ? 64 / ND : 32;
    __shared__ __align__(16) float qs[ATT_WARPS][HD];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int unit = blockIdx.x * ATT_WARPS + warp;
    if (unit >= num_rows * num_heads) return;
    const int row = unit / num_heads, head = unit % num_heads;
    const int kv_head = head / (num_heads / num_kv_heads);
    const u32* positions = meta;
    const u32* table = meta + 2 * num_rows + meta[num_rows + row];
    const int ctx = (int)positions[row] + 1;
    const u64 stride = (u64)num_kv_heads * HD;
    const u64 base = (u64)kv_head * HD;

    const float* qh = q + ((u64)row * num_heads + head) * HD;
#pragma unroll
    for (int i = 0; i < ND; i++) qs[warp][32 * i + lane] = qh[32 * i + lane];
    __syncwarp();

    float m_tot = NEG_INF, l_tot = 0.0f, acc_tot[ND];
    float m_s = NEG_INF, l_s = 0.0f, acc_s[ND];
#pragma unroll
    for (int i = 0; i < ND; i++) acc_tot[i] = acc_s[i] = 0.0f;

    for (int t0 = 0; t0 < ctx; t0 += ATT_TILE) {
        // Each lane's two positions of the tile (past the context: the last position, whose
        // score is then discarded) and their cache slots, shared with the P·V loop below.
        u32 slot[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int pos = min(t0 + 32 * h + lane, ctx - 1);
            slot[h] = table[pos / block_size] * (u32)block_size + (u32)(pos % block_size);
        }
        // Both scores as two independent fmaf chains over ascending dims, four dims per load.
        float dot[2] = {0.0f, 0.0f};
        {
            const float4* q4 = (const float4*)qs[warp];
            const float4* k0 = (const float4*)(k_cache + (u64)slot[0] * stride + base);
            const float4* k1 = (const float4*)(k_cache + (u64)slot[1] * stride + base);
#pragma unroll 8
            for (int d = 0; d < HD / 4; d++) {
                const float4 qv = q4[d], a = k0[d], b = k1[d];
                dot[0] = fmaf(qv.x, a.x, dot[0]);
                dot[0] = fmaf(qv.y, a.y, dot[0]);
                dot[0] = fmaf(qv.z, a.z, dot[0]);
                dot[0] = fmaf(qv.w, a.w, dot[0]);
                dot[1] = fmaf(qv.x, b.x, dot[1]);
                dot[1] = fmaf(qv.y, b.y, dot[1]);
                dot[1] = fmaf(qv.z, b.z, dot[1]);
                dot[1] = fmaf(qv.w, b.w, dot[1]);
            }
        }
        float s[2], e[2];
#pragma unroll
        for (int h = 0; h < 2; h++) s[h] = (t0 + 32 * h + lane < ctx) ? __fmul_rn(dot[h], scale) : NEG_INF;
        const float m_new = fmaxf(m_s, warp_max(fmaxf(s[0], s[1])));
        const float alpha = expf(m_s - m_new);
#pragma unroll
        for (int h = 0; h < 2; h++) e[h] = (t0 + 32 * h + lane < ctx) ? expf(s[h] - m_new) : 0.0f;
        l_s = __fadd_rn(__fmul_rn(l_s, alpha), warp_sum(__fadd_rn(e[0], e[1])));
        const int tlen = min(ATT_TILE, ctx - t0);
#pragma unroll
        for (int i = 0; i < ND; i++) acc_s[i] = __fmul_rn(acc_s[i], alpha);
        // P·V in ascending positions; JU positions' V rows are loaded before their fmafs, so the
        // loads overlap (the fmaf order per element is unchanged).
        int j = 0;
        for (; j + JU <= tlen; j += JU) {
            float v[JU][ND];
#pragma unroll
            for (int u = 0; u < JU; u++) {
                const int jj = j + u;
                const u32 sl = __shfl_sync(0xffffffffu, jj < 32 ? slot[0] : slot[1], jj % 32);
                const float* vr = v_cache + (u64)sl * stride + base;
#pragma unroll
                for (int i = 0; i < ND; i++) v[u][i] = vr[32 * i + lane];
            }
#pragma unroll
            for (int u = 0; u < JU; u++) {
                const int jj = j + u;
                const float p = __shfl_sync(0xffffffffu, jj < 32 ? e[0] : e[1], jj % 32);
#pragma unroll
                for (int i = 0; i < ND; i++) acc_s[i] = fmaf(p, v[u][i], acc_s[i]);
            }
        }
        for (; j < tlen; j++) {
            const float p = __shfl_sync(0xffffffffu, j < 32 ? e[0] : e[1], j % 32);
            const u32 sl = __shfl_sync(0xffffffffu, j < 32 ? slot[0] : slot[1], j % 32);
            const float* vr = v_cache + (u64)sl * stride + base;
#pragma unroll
            for (int i = 0; i < ND; i++) acc_s[i] = fmaf(p, vr[32 * i + lane], acc_s[i]);
        }
        m_s = m_new;
        if ((t0 + ATT_TILE) % ATT_SPLIT == 0 || t0 + ATT_TILE >= ctx) {
            const float m = fmaxf(m_tot, m_s);
            const float a_tot = expf(m_tot - m), a_s = expf(m_s - m);
            l_tot = __fadd_rn(__fmul_rn(l_tot, a_tot), __fmul_rn(l_s, a_s));
#pragma unroll
            for (int i = 0; i < ND; i++) {
                acc_tot[i] = __fadd_rn(__fmul_rn(acc_tot[i], a_tot), __fmul_rn(acc_s[i], a_s));
                acc_s[i] = 0.0f;
            }
            m_tot = m;
            m_s = NEG_INF;
            l_s = 0.0f;
        }
    }
    float* oh = out + ((u64)row * num_heads + head) * HD;
#pragma unroll
    for (int i = 0; i < ND; i++) oh[32 * i + lane] = __fdiv_rn(acc_tot[i], l_tot);
}

#define ATTENTION_KERNEL(HD)                                                                                \
    extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32)                                            \
        attention_##HD(const float* q, const float* k_cache, const float* v_cache, const u32* meta,         \
                       int num_rows, int num_heads, int num_kv_heads, int block_size, float scale, float* out) { \
        attention_body<HD>(q, k_cache, v_cache, meta, num_rows, num_heads, num_kv_heads, block_size, scale, \
                           out);                                                                            \
    }
ATTENTION_KERNEL(32)
ATTENTION_KERNEL(64)
ATTENTION_KERNEL(96)
ATTENTION_KERNEL(128)
ATTENTION_KERNEL(160)
ATTENTION_KERNEL(192)
ATTENTION_KERNEL(224)
ATTENTION_KERNEL(256)
