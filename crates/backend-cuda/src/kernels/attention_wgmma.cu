// Paged causal grouped-query attention of prefill chunks on Hopper's warpgroup MMA
// (`attention_wgmma_{64,96,128}_{f16,bf16}`): attention_mma.cu's canonical form, whose comment
// defines it, for the launches whose blocks walk several rows of one lane at once (no split of
// the context over blocks). The same metadata, arguments and launch as attention_mma.cu.
//
// Why the same bits. A walk's 64 (row, head) pairs are one warpgroup's m64 tile, warp w holding
// pairs 16 w .. 16 w + 15 as attention_mma.cu's warp w does, and a wgmma's accumulators and
// register A fragments are laid out per warp as the mma.sync m16n8k16 ones (a thread's elements
// of each 8 columns: rows g and g + 8, columns 2 t and 2 t + 1). A wgmma k16 step gives each
// element the bits of the mma.sync step with the same operands at the same k positions
// (tests/mma_probe.rs), and an element depends on its own row and column only, so a wgmma over
// 64 positions (scores) or the head's dims (P·V) is the mma.sync steps of its n8 blocks. Issued
// in the form's order — the scores over 16-dim steps ascending, q's pieces in order within a
// step, onto zeroed accumulators; P·V over 16 positions ascending, e's pieces in order — every
// chain is the form's chain. The softmax, the split ends and the output are attention_mma.cu's
// own functions on the same elements.
//
// Layout. K and V tiles (64 positions) and each piece of q (64 pairs) are wgmma core matrices
// without swizzle, [HD / 8][64][16 bytes]: 8 rows (positions or pairs) of 8 dims, 128 contiguous
// bytes. The scores read q (A) and K (B) K-major: 8-row groups 128 bytes apart (SBO), 8-dim groups
// 1,024 apart (LBO), a k16 step 2,048 bytes on. P·V reads V as B MN-major (its dims contiguous,
// trans-b): 8-position groups 128 bytes apart (LBO), 8-dim groups 1,024 (SBO), a k16 step 256
// bytes on. The tiles are staged by cp.async from the paged cache by every thread of the block,
// two buffers, the next tile's copy overlapping this tile's work (`atm_stage_kv`'s CORE layout).

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The operands of 8 output columns: a thread's 4 accumulators of one n8 block.
#define ATW_D4(n) "+f"(d[n][0]), "+f"(d[n][1]), "+f"(d[n][2]), "+f"(d[n][3])
// The wgmma steps of one 16-bit type TY, named by NAME:
// - atw_qk_NAME(d, da, db): d += A (64 x 16, descriptor da) · B (16 x 64, descriptor db), both
//   K-major (the scores);
// - atw_pv_NAME(d, a, db): d += A (64 x 16, this thread's fragment a) · B (16 x N, descriptor db,
//   MN-major: trans-b), N = 64, 96 or 128 by d's size (P·V).
#define ATW_WRAPPERS(NAME, TY) \
__device__ __forceinline__ void atw_qk_##NAME(float (&d)[8][4], u64 da, u64 db) { \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " \
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
        : ATW_D4(0), ATW_D4(1), ATW_D4(2), ATW_D4(3), ATW_D4(4), ATW_D4(5), ATW_D4(6), ATW_D4(7) \
        : "l"(da), "l"(db)); \
} \
__device__ __forceinline__ void atw_pv_##NAME(float (&d)[8][4], const u32 (&a)[4], u64 db) { \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " \
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n" \
        : ATW_D4(0), ATW_D4(1), ATW_D4(2), ATW_D4(3), ATW_D4(4), ATW_D4(5), ATW_D4(6), ATW_D4(7) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)); \
} \
__device__ __forceinline__ void atw_pv_##NAME(float (&d)[12][4], const u32 (&a)[4], u64 db) { \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n96k16.f32." TY "." TY " " \
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, {%48,%49,%50,%51}, %52, p, 1, 1, 1;\n}\n" \
        : ATW_D4(0), ATW_D4(1), ATW_D4(2), ATW_D4(3), ATW_D4(4), ATW_D4(5), ATW_D4(6), ATW_D4(7), \
          ATW_D4(8), ATW_D4(9), ATW_D4(10), ATW_D4(11) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)); \
} \
__device__ __forceinline__ void atw_pv_##NAME(float (&d)[16][4], const u32 (&a)[4], u64 db) { \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " \
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n" \
        : ATW_D4(0), ATW_D4(1), ATW_D4(2), ATW_D4(3), ATW_D4(4), ATW_D4(5), ATW_D4(6), ATW_D4(7), \
          ATW_D4(8), ATW_D4(9), ATW_D4(10), ATW_D4(11), ATW_D4(12), ATW_D4(13), ATW_D4(14), ATW_D4(15) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)); \
}
ATW_WRAPPERS(f16, "f16")
ATW_WRAPPERS(bf16, "bf16")

template <int ST> struct Atw;
template <> struct Atw<KV_F16> {
    __device__ static void qk(float (&d)[8][4], u64 da, u64 db) { atw_qk_f16(d, da, db); }
    template <int NB> __device__ static void pv(float (&d)[NB][4], const u32 (&a)[4], u64 db) { atw_pv_f16(d, a, db); }
};
template <> struct Atw<KV_BF16> {
    __device__ static void qk(float (&d)[8][4], u64 da, u64 db) { atw_qk_bf16(d, da, db); }
    template <int NB> __device__ static void pv(float (&d)[NB][4], const u32 (&a)[4], u64 db) { atw_pv_bf16(d, a, db); }
};

// A shared-memory descriptor without swizzle: start, leading and stride byte offsets.
__device__ __forceinline__ u64 atw_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32);
}

// The wgmma results are written asynchronously: after the wait, each accumulator is redefined
// by an empty asm so no read of it moves above the wait.
template <int NB> __device__ __forceinline__ void atw_fence(float (&d)[NB][4]) {
#pragma unroll
    for (int n = 0; n < NB; n++)
#pragma unroll
        for (int c = 0; c < 4; c++) asm volatile("" : "+f"(d[n][c])::"memory");
}
#endif

// Shared memory of one block (bytes): two buffers of the K and V tiles and q's pieces, as
// `attention_wgmma_smem` in attention_plan.rs.
__host__ __device__ constexpr int atw_smem_bytes(int hd, int pieces) { return (4 + pieces) * ATT_TILE * hd * 2; }

template <int HD, int ST>
__device__ __forceinline__ void attention_wgmma_body(const float* __restrict__ q, const u8* __restrict__ k_cache,
                                                     const u8* __restrict__ v_cache, const u32* __restrict__ meta,
                                                     int num_rows, int num_heads, int num_kv_heads, int block_size,
                                                     float scale, float* __restrict__ out, int rows_per_block,
                                                     int split_len, unsigned short* __restrict__ xb) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int P = Mma16<ST>::PIECES;
    constexpr int NB = HD / 8, KS = HD / 16;
    constexpr int TILE = ATT_TILE * HD * 2;  // bytes of a K or V tile, and of a piece of q
    extern __shared__ __align__(128) u8 atw_smem[];
    __shared__ u64 slots[ATT_TILE];  // a staged tile's positions' cache offsets (`atm_stage_kv`)
    u8* kv_tiles = atw_smem;         // two buffers of [K tile][V tile]
    u8* qs = atw_smem + 4 * TILE;    // [piece][HD / 8][64 pairs][16 bytes]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4, g = lane / 4;
    const int group = num_heads / num_kv_heads, kv_head = blockIdx.y;
    const u64 stride = (u64)num_kv_heads * HD, base = (u64)kv_head * HD;
    const int bx = gridDim.x - 1 - blockIdx.x;
    const int r_end = min((bx + 1) * rows_per_block, num_rows);
    const u32 q_at = smem_addr(qs);

    for (int r0 = bx * rows_per_block; r0 < r_end;) {
        const u32 toff = meta[num_rows + r0];
        int r1 = r0 + 1;
        while (r1 < r_end && meta[num_rows + r1] == toff) r1++;
        const u32* table = meta + 2 * num_rows + toff;
        const int num_pairs = (r1 - r0) * group;
        for (int p0 = 0; p0 < num_pairs; p0 += 4 * ATM_M) {
            const int p_end = min(p0 + 4 * ATM_M, num_pairs);
            const int ctx_max = atm_walk_ctx(meta, r0, p0, p_end, group);
            // This thread's rows of the warpgroup's m64 tile: pairs p0 + 16 warp + g + 8 h.
            int ctx[2], row[2], head[2];
            atm_pair_rows(meta, p0 + ATM_M * warp + g, p_end, r0, group, kv_head, ctx, row, head);
            atm_load_q<HD, ST>(q, p0 + ATM_M * warp, p_end, r0, group, num_heads, kv_head, lane,
                               [&](int m, int d, int c) {
                                   return qs + c * TILE + (d / 8) * (ATT_TILE * 16) + (ATM_M * warp + m) * 16 + 2 * (d % 8);
                               });
            float m_s[2] = {NEG_INF, NEG_INF}, l_s[2] = {0.0f, 0.0f};
            float m_tot[2] = {NEG_INF, NEG_INF}, l_tot[2] = {0.0f, 0.0f};
            float acc[NB][4], tot[NB][4], e[8][4];
#pragma unroll
            for (int n = 0; n < NB; n++)
#pragma unroll
                for (int c = 0; c < 4; c++) acc[n][c] = tot[n][c] = 0.0f;

            atm_stage_kv<HD, true>(kv_tiles, kv_tiles + TILE, 0, k_cache, v_cache, stride, base, table, block_size, 0,
                                   ctx_max - 1, slots, blockDim.x);
            for (int t0 = 0, it = 0; t0 < ctx_max; t0 += ATT_TILE, it++) {
                asm volatile("cp.async.wait_group 0;\n" ::);
                // This tile's K and V (and q's pieces) are in and visible to the tensor cores' reads;
                // every warp is done with the last tile, so the other buffer takes the next one.
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                __syncthreads();
                const u8* ks = kv_tiles + (it & 1) * 2 * TILE;
                const u32 k_at = smem_addr(ks), v_at = smem_addr(ks + TILE);
                if (t0 + ATT_TILE < ctx_max) {
                    u8* next = kv_tiles + ((it + 1) & 1) * 2 * TILE;
                    atm_stage_kv<HD, true>(next, next + TILE, 0, k_cache, v_cache, stride, base, table, block_size,
                                           t0 + ATT_TILE, ctx_max - 1, slots, blockDim.x);
                }
                const bool live[2] = {t0 < ctx[0], t0 < ctx[1]};
#pragma unroll
                for (int j = 0; j < 8; j++)
#pragma unroll
                    for (int c = 0; c < 4; c++) e[j][c] = 0.0f;
                asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
                for (int kk = 0; kk < KS; kk++)
#pragma unroll
                    for (int c = 0; c < P; c++)
                        Atw<ST>::qk(e, atw_desc(q_at + c * TILE + kk * 2048, 1024, 128),
                                    atw_desc(k_at + kk * 2048, 1024, 128));
                asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
                asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
                atw_fence(e);
                atm_softmax(e, acc, m_s, l_s, ctx, live, true, t0, t, scale);
                // Every 16 positions' A fragments before the first P·V step reads any of them.
                u32 pa[ATT_TILE / 16][P][4];
#pragma unroll
                for (int s = 0; s < ATT_TILE / 16; s++) atm_p_frags<ST>(e, s, true, pa[s]);
                asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
                for (int s = 0; s < ATT_TILE / 16; s++)
#pragma unroll
                    for (int c = 0; c < P; c++) Atw<ST>::pv(acc, pa[s][c], atw_desc(v_at + s * 256, 128, 1024));
                asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
                asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
                atw_fence(acc);
                atm_split_end(acc, tot, m_s, l_s, m_tot, l_tot, ctx, live, row, head, t0, t, split_len, nullptr,
                              num_heads, 1);
            }
            atm_write_out(tot, l_tot, ctx, row, head, t, num_heads, out, xb);
            __syncthreads();  // the next walk restages q and the tiles
        }
        r0 = r1;
    }
#endif
}

// The launch arguments are attention_mma.cu's; this kernel never splits a context over blocks
// (the backend launches it without `part`), so `part`, `num_splits`, `walk_len` and `arrivals`
// are unused.
#define ATTENTION_WGMMA_KERNEL(HD, NAME, ST)                                                                     \
    extern "C" __global__ void __launch_bounds__(128)                                                             \
        attention_wgmma_##HD##_##NAME(const float* q, const u8* k_cache, const u8* v_cache, const u32* meta,     \
                                      int num_rows, int num_heads, int num_kv_heads, int block_size, float scale, \
                                      float* out, int rows_per_block, float* part, int num_splits, int split_len, \
                                      int walk_len, unsigned short* xb, u32* arrivals) {                         \
        TL_BLOCK();                                                                                              \
        PDL_ENTRY();                                                                                             \
        attention_wgmma_body<HD, ST>(q, k_cache, v_cache, meta, num_rows, num_heads, num_kv_heads, block_size,    \
                                     scale, out, rows_per_block, split_len, xb);                                 \
    }
#define ATTENTION_WGMMA_KERNELS(HD)              \
    ATTENTION_WGMMA_KERNEL(HD, f16, KV_F16)      \
    ATTENTION_WGMMA_KERNEL(HD, bf16, KV_BF16)
ATTENTION_WGMMA_KERNELS(64)
ATTENTION_WGMMA_KERNELS(96)
ATTENTION_WGMMA_KERNELS(128)
