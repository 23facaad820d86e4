// linear on Hopper's tensor cores, warp-specialised and fed by TMA: `linear_tma_bf16_n{8,16,32,64,
// 128,192}` (128 features a task) and `linear_tma_bf16_n{16,32,64}_f64` (64 features a task, for
// weights with too few 128-feature tiles to fill the device), the production kernels for every
// row count on Hopper. The canonical arithmetic is the one
// linear_mma.cu defines, and the one its mma.sync decode kernels and linear_wgmma.cu's cp.async-fed
// kernel compute (those stay for measuring against: PLUMB_CUDA_TMA=0). Uses linear_wgmma.cu's
// WG_KS (64 of K per stage) and smem_addr.
//
// A task is FT features x N rows over the chunks [split * chunks_per_split, ...) of K; a block
// (nine warps, 288 threads; twelve for 192 rows, `tma_threads`) walks tasks (persistent: as many
// blocks as the device keeps resident). Warp 8 is the producer: one of its threads copies each stage (64 of K) of the task's
// FT weight rows and N activation rows with TMA bulk tensor copies (128-byte swizzle; zeros past
// the last feature, row and K) into a ring of STAGES buffers, announcing each on its `full`
// mbarrier (transaction bytes), and goes on to the next task's stages while the consumers store.
// Warpgroups 0 and 1 consume: each waits for a stage, issues its 4 wgmma k16 steps (FT = 128: its
// 64 features as A, the N rows as B, m64nNk16; FT = 64: the task's 64 features as A, its half of
// the N rows as B, m64n(N/2)k16) and gives the buffer back on its `empty` mbarrier (one
// arrival per consumer warp) once the steps reading it have completed. No block-wide barrier in
// the main loop, so the tensor cores never wait for staging. A chunk's partial starts with
// scale-d = 0 (tests/mma_probe.rs: the same bits as zeroed accumulators, and a wgmma of any N the
// same as mma.sync). With one split the task folds its chunks in registers; with several (few
// rows: `ops::decode_split`), each chunk's partial goes to `part` ([chunk][row][feature]) and they
// are folded in chunk order — by the last block of a feature tile to arrive where `counters` is
// given (they count arrivals, never add values; that block resets its counter), else by
// `fold_chunks` after the kernel (`fold_column`, the fold both run, and `fold_chunks` are in
// linear_tma_fold.cu). The same fold either way, so the split changes no bit.
// Under `glu` (gate|up with the SwiGLU) a task takes 64 features of gate and the same 64 of up,
// and stores silu(gate) · up with silu_mul's arithmetic: the bits of the two products and
// silu_mul apart, without the products' round trip to memory. Decode rows (GLU_XCH, the `_glu`
// instances): warpgroup 0 takes gate's 64, warpgroup 1 up's, and hands its sums over through
// shared memory; split K folds both. Prefill rows (GLU_IL, the `_gli` instances, whole K):
// warpgroup h takes features 32 h .. 32 h + 31 of the task's, gate's and up's rows interleaved
// in 8-row atoms (rows 16 w .. 16 w + 7 of its tile gate's features 8 w .. 8 w + 7, the next 8
// up's; one box of a rank-4 map over both weights a stage, tma::bf16_pair_map), so a thread's accumulators of row g are gate's and of row g + 8 up's of the same
// (feature, row): the SwiGLU in registers, both warpgroups at once, nothing exchanged. An
// element's products depend on its own weight row and row of x only, wherever the tile puts
// them (tests/mma_probe.rs): the same bits as the products apart.


// K-major operand with 128-byte swizzle: rows of 64 bf16 (128 bytes), 8-row atoms 1024 bytes
// apart; a k16 step inside the row starts 32 bytes further.
__device__ __forceinline__ u64 tma_desc(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Waits until the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done = 0;
    while (!done) {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    }
}

// A CUtensorMap, passed by value as a __grid_constant__ kernel parameter.
struct __align__(64) TmaMap {
    u64 opaque[16];
};

// The tile at (k, row) of `map` into shared memory at `dst`, completing its bytes on `bar`.
__device__ __forceinline__ void tma_load_2d(u32 dst, const TmaMap* map, int k, int row, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
        "[%4];\n" ::"r"(dst),
        "l"((u64)map), "r"(k), "r"(row), "r"(bar)
        : "memory");
}

// The box at (c0, c1, c2, c3) of a rank-4 `map` into shared memory at `dst`, completing its bytes
// on `bar`.
__device__ __forceinline__ void tma_load_4d(u32 dst, const TmaMap* map, int c0, int c1, int c2, int c3, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];\n" ::"r"(dst),
        "l"((u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
}

// The tile at (k, row) of `map` into shared memory at `dst` of every CTA of the cluster in `mask`,
// completing its bytes on each one's barrier at `bar` (the same offsets in each).
__device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const TmaMap* map, int k, int row, u32 bar,
                                                      unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
        "[%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
        "l"((u64)map), "r"(k), "r"(row), "r"(bar), "h"(mask)
        : "memory");
}

// The box at (c0, c1, c2, c3) of a rank-4 `map` into shared memory at `dst` of every CTA of the
// cluster in `mask`, completing its bytes on each one's barrier at `bar`.
__device__ __forceinline__ void tma_load_4d_multicast(u32 dst, const TmaMap* map, int c0, int c1, int c2, int c3,
                                                      u32 bar, unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
        "[%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
        "l"((u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "h"(mask)
        : "memory");
}

// An arrival on the barrier at `bar` of CTA `cta` of this cluster. Default semantics (release at
// CTA scope), as CUTLASS's cluster barrier arrives: what it releases are this warp's reads of the
// stage, complete at the wgmma wait before it. `.release.cluster` compiled to MEMBAR.ALL.GPU before
// every arrival, a stage and warp, and halved the clustered products' speed (session 31's SASS).
__device__ __forceinline__ void mbar_arrive_cluster(u32 bar, u32 cta) {
    asm volatile(
        "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
        "r"(cta)
        : "memory");
}

// Every thread of every CTA of the cluster, past what each did before (memory included).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// d[N / 2] = (accumulate ? d : 0) + A * B: one m64nNk16 step.
template <int N>
__device__ __forceinline__ void wgmma_n(float (&d)[N / 2], u64 da, u64 db, int accumulate) {
    if constexpr (N == 8) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
            "{%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "l"(da), "l"(db), "r"(accumulate));
    }
    if constexpr (N == 16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
            "{%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
            : "l"(da), "l"(db), "r"(accumulate));
    }
    if constexpr (N == 32) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
            : "l"(da), "l"(db), "r"(accumulate));
    }
    if constexpr (N == 64) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(da), "l"(db), "r"(accumulate));
    }
    if constexpr (N == 128) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(da), "l"(db), "r"(accumulate));
    }
    if constexpr (N == 192) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, %96, %97, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
            : "l"(da), "l"(db), "r"(accumulate));
    }
}
#endif

// Stages of a block with N rows and FT features: six for the 128-row tile and five for the
// 192-row one (one block per SM), else as many as leave room for two blocks per SM.
// `tma::tma_smem` sizes the launch from the same table: change both.
__host__ __device__ constexpr int tma_stages(int n, int ft) {
    return ft == 64 ? 6 : n == 128 ? 6 : n == 8 ? 6 : n == 64 ? 4 : 5;
}
// The 192-row tile's consumers hold 2 x 96 accumulators a thread: its block is three warpgroups
// (the third the producer's), which hand registers over with setmaxnreg — 40 for the producer's,
// 232 for each consumer's (a sub-partition's 16K registers: 40 + 2 x 232 per warp slot of 32).
// The others are nine warps with at most 168 registers each (three warps on a sub-partition).
__host__ __device__ constexpr int tma_threads(int n) { return n > 128 ? 384 : 288; }
__host__ __device__ constexpr int tma_stage_bytes(int n, int ft) { return ft * 128 + n * 128; }
// Words a consumer thread hands over per round of a GLU task's store (`glu`): the launch adds
// GLU_XCH x 128 floats (8 KB) of shared memory past the stages (`tma::TMA_GLU_XCH_BYTES`).
#define GLU_XCH 16
// The `glu` modes of linear_tma (above).
#define GLU_NONE 0
#define GLU_EXCHANGE 1
#define GLU_IL 2

// Up to three weights of one input in one launch (`seg_of`, linear.cu): weight s has n_s
// features, its own tensor map and output, and whole feature tiles of its own; `part` and
// `counters` index the features and tiles of all of them end to end.
template <int N, int FT, int SPC, int CL, int GLU, bool NRM>
__device__ __forceinline__ void linear_tma(const TmaMap& xmap, const TmaMap& wmap0, const TmaMap& wmap1,
                                           const TmaMap& wmap2, float* out0, float* out1, float* out2,
                                           int num_rows, int n0, int n1, int n2, int k_in, int chunks_per_split,
                                           float* __restrict__ part, u32* __restrict__ counters, int resid,
                                           unsigned short* __restrict__ xb, const float* __restrict__ nx,
                                           const float* __restrict__ nw, float eps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // NW: the rows of one warpgroup's wgmma (all N, or half of them when the warpgroups share
    // 64 features); W_BYTES: the weight tile's bytes in a stage, the activations' follow.
    // SPC: stages of 64 of K in a chunk (the weight's fold chunk, 256 or 1,024: ops_linear::fold_chunk).
    constexpr int STAGES = tma_stages(N, FT), STAGE = tma_stage_bytes(N, FT), KC = SPC * WG_KS;
    constexpr int NW = FT == 128 ? N : N / 2, W_BYTES = FT * 128;
    // NRM: the producer copies only the weight tile; the consumers write x's (`tma_norm_write`).
    constexpr int TX = NRM ? W_BYTES : STAGE;
    static_assert(!NRM || (FT == 128 && CL == 1), "the norm inside: 128 features a task, one CTA");
    static_assert(FT == 128 || (FT == 64 && N >= 16), "64-feature tasks split at least 16 rows");
    // CL: CTAs of a cluster (1 or 2). Two take a pair of feature tiles of the same rows and K, in
    // lockstep, and each copies half of the rows of x to both (`multicast`): x crosses from L2 once
    // a pair instead of once a tile. Only where bytes land: the same arithmetic, the same bits.
    // Four (`_c4`): two row tiles by two feature tiles; each CTA copies half the rows of x to its
    // feature-pair peer and itself, and half the weight tile's rows to its row-pair peer and
    // itself.
    static_assert(CL == 1 || CL == 2 || CL == 4, "clusters of one, two or four CTAs");
    static_assert(CL != 4 || (FT == 128 && GLU != GLU_EXCHANGE && !NRM), "clusters of four: 128 features, whole tiles");
    constexpr int X_ROWS = CL == 1 ? N : N / 2;  // rows of x this CTA copies each stage
    constexpr int RG = CL == 4 ? 2 : 1, FG = CL == 1 ? 1 : 2;  // row tiles, feature tiles a cluster
    const int rank = CL > 1 ? (int)(blockIdx.x % CL) : 0, fr = CL == 4 ? rank % 2 : rank, rr = CL == 4 ? rank / 2 : 0;
    extern __shared__ __align__(128) u8 smem[];
    __shared__ __align__(8) u64 bars[2 * STAGES];
    __shared__ int is_last;
    // The swizzled tiles need 1024-byte alignment; the launch gives 1 KB of slack for it.
    const u32 base = (smem_addr(smem) + 1023) & ~1023u;
    const u32 full0 = smem_addr(&bars[0]), empty0 = smem_addr(&bars[STAGES]);
    const int num_chunks = (k_in + KC - 1) / KC;
    const int splits = (num_chunks + chunks_per_split - 1) / chunks_per_split;
    const int row_tiles = (num_rows + N - 1) / N;
    const int n_all = n0 + n1 + n2;
    // GLU (the `_glu` and `_gli` instances: 128 features a task, one CTA a cluster but for `_gli_c2`; n0 = n1,
    // n2 = 0, or under GLU_IL whether the pair map holds up's rows first): a task is 64 features of gate (weight 0) and the same 64 of up (weight 1), staged
    // from maps of 64-row boxes (GLU_EXCHANGE: gate's to warpgroup 0, up's to 1) or 8-row ones
    // (GLU_IL: interleaved); the task stores silu(gate) · up (`silu_times`) of its 64 features,
    // with `xb` also their rounded k-permuted copy as silu_mul_bf16 writes it.
    static_assert(GLU != GLU_EXCHANGE || (FT == 128 && CL == 1 && N <= 64), "GLU: 128 features a task, one CTA, decode rows");
    static_assert(GLU != GLU_IL || (FT == 128 && N >= 128 && !NRM), "GLU_IL: 128 features a task, prefill rows");
    const int all_tiles =
        GLU ? (n0 + 63) / 64 : (n0 + FT - 1) / FT + (n1 + FT - 1) / FT + (n2 + FT - 1) / FT;
    // With clusters of two, a task is a pair of feature tiles, rank r taking tile 2 g + r.
    const int row_groups = RG == 1 ? row_tiles : (row_tiles + RG - 1) / RG;
    const int tasks = row_groups * splits * ((all_tiles + FG - 1) / FG);
    const bool split = splits > 1;
    // Task t (row tiles fastest, so blocks running together share a weight tile): rows r0.., the
    // chunks of one split, FT features from f0. The block walks tasks blockIdx.x, + gridDim.x, …
    // (persistent: the producer stages the next task while the consumers store this one); a
    // cluster walks its tasks together. `own`: false for the second rank of a pair past the last
    // tile, which stages and computes the last tile again (its peer needs its half of x) and
    // stores nothing.
    const int first = (int)blockIdx.x / CL, stride = (int)gridDim.x / CL;
    auto task = [&](int t, int& r0, int& c_lo, int& c_hi, int& ft, bool& own) {
        // Of four: past the rows for the second of an odd count (zeros copied, nothing stored).
        r0 = RG == 1 ? (t % row_groups) * N : ((t % row_groups) * RG + rr) * N;
        const int rest = t / row_groups;
        c_lo = (rest % splits) * chunks_per_split;
        c_hi = min(num_chunks, c_lo + chunks_per_split);
        ft = FG * (rest / splits) + fr;
        own = ft < all_tiles;
        ft = min(ft, all_tiles - 1);
    };
    if (threadIdx.x == 0) {
        for (int b = 0; b < STAGES; b++) {
            mbar_init(full0 + 8 * b, 1);
            // Every consumer warp of the cluster releases a stage: a CTA's copy of x lands in all.
            mbar_init(empty0 + 8 * b, 8 * CL);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if constexpr (CL > 1) cluster_sync();  // the peers' barriers exist before any copy lands there

    // Stage s of feature tile ft's weight rows into dst: one box of FT rows of its weight, or
    // under `glu` the tile's 64 rows of gate and, 8 KB on, the same 64 of up, or (GLU_IL) for
    // each warpgroup h and warp w, gate's 8 rows of features 32 h + 8 w .. and up's same 8 after
    // them (each 8 rows one 1,024-byte swizzle atom: the layout one box of 64 rows would give),
    // all in one box of the rank-4 pair map.
    auto load_w = [&](u32 dst, int s, int ft, u32 full) {
        // Clusters of four: this CTA's half of the tile's rows, into itself and its row-pair peer.
        const unsigned short wmask = (unsigned short)((1u << fr) | (1u << (fr + 2)));
        if constexpr (GLU == GLU_IL) {
            // One box of the pair map (tma::bf16_pair_map): groups ft * 8 .. ft * 8 + 7 of 8
            // features, each gate's 8 rows then up's (of four: groups 4 rr .. 4 rr + 3).
            if constexpr (CL == 4)
                tma_load_4d_multicast(dst + rr * (W_BYTES / 2), &wmap0, s * WG_KS, 0, 0, ft * 8 + rr * 4, full, wmask);
            else
                tma_load_4d(dst, &wmap0, s * WG_KS, 0, 0, ft * 8, full);
            return;
        }
        if constexpr (GLU == GLU_EXCHANGE) {
            tma_load_2d(dst, &wmap0, s * WG_KS, ft * 64, full);
            tma_load_2d(dst + 64 * 128, &wmap1, s * WG_KS, ft * 64, full);
            return;
        }
        const Seg sg = seg_of(ft, FT, n0, n1);
        if constexpr (CL == 4)
            tma_load_2d_multicast(dst + rr * (W_BYTES / 2), pick3(sg.s, &wmap0, &wmap1, &wmap2), s * WG_KS,
                                  sg.u * FT + rr * (FT / 2), full, wmask);
        else
            tma_load_2d(dst, pick3(sg.s, &wmap0, &wmap1, &wmap2), s * WG_KS, sg.u * FT, full);
    };
    if (threadIdx.x >= 256) {
        if constexpr (tma_threads(N) == 384) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (threadIdx.x == 256) {
            // The weight tiles of the first task's first stages go out before waiting on the kernel
            // before (the kernel's PDL_LAUNCH came first; no kernel of a forward writes a weight,
            // dequant.cu), the activations' after: a stage's barrier completes on both.
            int early = 0;
            if (EARLY_WEIGHTS && first < tasks) {
                int r0, c_lo, c_hi, ft;
                bool own;
                task(first, r0, c_lo, c_hi, ft, own);
                for (int s = c_lo * SPC; s < c_hi * SPC && early < STAGES; s++, early++) {
                    mbar_expect_tx(full0 + 8 * early, TX);
                    load_w(base + early * STAGE, s, ft, full0 + 8 * early);
                }
            }
            PDL_WAIT();
            int i = 0;  // stages issued by this block, over all its tasks
            for (int t = first; t < tasks; t += stride) {
                int r0, c_lo, c_hi, ft;
                bool own;
                task(t, r0, c_lo, c_hi, ft, own);
                for (int s = c_lo * SPC; s < c_hi * SPC; s++, i++) {
                    const int b = i % STAGES;
                    if (i >= STAGES) mbar_wait(empty0 + 8 * b, ((i / STAGES) + 1) & 1);
                    const u32 full = full0 + 8 * b, dst = base + b * STAGE;
                    if (i >= early) {
                        mbar_expect_tx(full, TX);
                        load_w(dst, s, ft, full);
                    }
                    if constexpr (CL > 1) {
                        tma_load_2d_multicast(dst + W_BYTES + fr * X_ROWS * 128, &xmap, s * WG_KS,
                                              r0 + fr * X_ROWS, full, CL == 4 ? (unsigned short)(0x3u << (2 * rr)) : 0x3);
                    } else if constexpr (!NRM) {
                        tma_load_2d(dst + W_BYTES, &xmap, s * WG_KS, r0, full);
                    }
                }
            }
        } else {
            PDL_WAIT();
        }
        if constexpr (CL > 1) cluster_sync();  // no CTA leaves while a peer may still reach it
        return;
    }
    if constexpr (tma_threads(N) == 384) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    PDL_WAIT();  // the consumers read and write nothing global before

    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int g = lane / 4, t4 = lane % 4;
    int i = 0;  // stages consumed, over all tasks
    // NRM: 1 / rms of the task's rows (recomputed where a task starts other rows) and how many.
    __shared__ float ninv[NRM ? N : 1];
    int inv_r0 = -1, nr = 0;
    NormShare<N> share;  // NRM: the next stage's values of x and nw
    // A stage goes back to every CTA of the cluster: each one's copy of x lands in all of them.
    auto release = [&](int b) {
        mbar_arrive(empty0 + 8 * b);
        if constexpr (CL == 2) mbar_arrive_cluster(empty0 + 8 * b, rank ^ 1);
        if constexpr (CL == 4)
            for (int r = 0; r < CL; r++)
                if (r != rank) mbar_arrive_cluster(empty0 + 8 * b, r);
    };
    for (int t = first; t < tasks; t += stride) {
        int r0, c_lo, c_hi, ft;
        bool own;
        task(t, r0, c_lo, c_hi, ft, own);
        // This tile's weight has n_out features; the thread's first is m0 of them, and m0 + f_all
        // of the launch's (`part` holds all the weights' features end to end). Its rows start at
        // n0w: the task's first, or its second half's for warpgroup 1 of a 64-feature task.
        const Seg sg = seg_of(ft, FT, n0, n1);
        const int n_out = GLU ? n0 : pick3(sg.s, n0, n1, n2);
        const int m0 = GLU == GLU_IL         ? ft * 64 + 32 * wg + 8 * warp + g
                       : GLU == GLU_EXCHANGE ? ft * 64 + 16 * warp + g
                                             : sg.u * FT + (FT == 128 ? 64 * wg : 0) + 16 * warp + g;
        const int n0w = r0 + (FT == 128 ? 0 : wg * NW);
        if constexpr (NRM) {
            // The first stage's share goes out before the inverse rms (which it does not need).
            nr = min(N, num_rows - r0);
            tma_norm_load<N>(share, nx, nw, r0, nr, k_in, c_lo * SPC);
            if (r0 != inv_r0) tma_norm_inv<N>(nx, r0, nr, k_in, eps, ninv);
            inv_r0 = r0;
        }
        float d[NW / 2], acc[NW / 2];
        for (int c = c_lo; c < c_hi; c++) {
#pragma unroll
            for (int q = 0; q < SPC; q++, i++) {
                const int b = i % STAGES;
                // NRM: the tile of x, written while the weights arrive, and the next stage's share
                // sent for, in flight through this stage's wait and products.
                if constexpr (NRM) {
                    const int s = c * SPC + q;
                    tma_norm_write<N>(base + b * STAGE + W_BYTES, share, ninv, nr, k_in, s);
                    if (s + 1 < c_hi * SPC) tma_norm_load<N>(share, nx, nw, r0, nr, k_in, s + 1);
                }
                mbar_wait(full0 + 8 * b, (i / STAGES) & 1);
                // A warpgroup's rows of x start at a multiple of 8 rows (1,024 bytes: whole swizzle atoms).
                const u32 a = base + b * STAGE + (FT == 128 ? wg * (64 * 128) : 0);
                const u32 x = base + b * STAGE + W_BYTES + (FT == 128 ? 0 : wg * (NW * 128));
                asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
                for (int step = 0; step < WG_KS / 16; step++)
                    wgmma_n<NW>(d, tma_desc(a + 32 * step), tma_desc(x + 32 * step), q + step > 0);
                asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
                if (q > 0) {
                    // The previous stage's steps have completed: its buffer goes back to the producer.
                    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
                    if (lane == 0) release((i - 1) % STAGES);
                }
            }
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            if (lane == 0) release((i - 1) % STAGES);
            if (split) {
#pragma unroll
                for (int e = 0; e < NW / 2; e++) {
                    const int m = m0 + 8 * ((e / 2) % 2), n = n0w + 8 * (e / 4) + 2 * t4 + e % 2;
                    if (own && m < n_out && n < num_rows)
                        part[((u64)c * num_rows + n) * n_all + (GLU ? wg * n0 : pick3(sg.s, 0, n0, n0 + n1)) + m] = d[e];
                }
            } else {
#pragma unroll
                for (int e = 0; e < NW / 2; e++) acc[e] = __fadd_rn(c == c_lo ? 0.0f : acc[e], d[e]);
            }
        }
        // Element e of this thread: feature 16 * warp + g + 8 * ((e / 2) % 2) of the warpgroup's
        // 64, row 8 * (e / 4) + 2 * t4 + e % 2 of the warpgroup's NW.
        float* out = pick3(sg.s, out0, out1, out2);
        if constexpr (GLU == GLU_IL) {
            // Elements e with (e / 2) % 2 = 0 are gate's of feature m0, e + 2 up's of the same row
            // (whole K: the host launches no split).
#pragma unroll
            for (int e = 0; e < NW / 2; e++) {
                if ((e / 2) % 2) continue;
                const int n = n0w + 8 * (e / 4) + 2 * t4 + e % 2;
                if ((CL == 1 || own) && m0 < n0 && n < num_rows) {  // one CTA: main's condition
                    // n2: whether the pair map staged up's rows first (tma::bf16_pair_map).
                    const float y = n2 ? silu_times(acc[e + 2], acc[e]) : silu_times(acc[e], acc[e + 2]);
                    out0[(u64)n * n0 + m0] = y;
                    if (xb) xb[(u64)n * n0 + kperm(m0)] = (unsigned short)bf16_bits(y);
                }
            }
            continue;
        }
        if (GLU == GLU_EXCHANGE && !split) {
            // Warpgroup 1 hands its up sums to warpgroup 0, whose threads hold the gate sums of the
            // same (feature, row) elements, GLU_XCH at a time through the shared words past the
            // stages (named barrier 1: the producer warp takes no part).
            float* xch = reinterpret_cast<float*>(smem + (base - smem_addr(smem)) + STAGES * STAGE);
            const int tid = threadIdx.x % 128;
#pragma unroll
            for (int e0 = 0; e0 < NW / 2; e0 += GLU_XCH) {
                if (wg == 1) {
#pragma unroll
                    for (int j = 0; j < GLU_XCH && e0 + j < NW / 2; j++) xch[j * 128 + tid] = acc[e0 + j];
                }
                asm volatile("bar.sync 1, 256;\n" ::: "memory");
                if (wg == 0) {
#pragma unroll
                    for (int j = 0; j < GLU_XCH && e0 + j < NW / 2; j++) {
                        const int e = e0 + j;
                        const int m = m0 + 8 * ((e / 2) % 2), n = n0w + 8 * (e / 4) + 2 * t4 + e % 2;
                        if (m < n0 && n < num_rows) {
                            const float y = silu_times(acc[e], xch[j * 128 + tid]);
                            out0[(u64)n * n0 + m] = y;
                            if (xb) xb[(u64)n * n0 + kperm(m)] = (unsigned short)bf16_bits(y);
                        }
                    }
                }
                asm volatile("bar.sync 1, 256;\n" ::: "memory");
            }
            continue;
        }
        if (!split) {
#pragma unroll
            for (int e = 0; e < NW / 2; e++) {
                const int m = m0 + 8 * ((e / 2) % 2), n = n0w + 8 * (e / 4) + 2 * t4 + e % 2;
                if (own && m < n_out && n < num_rows) store_out(out + (u64)n * n_out + m, acc[e], resid);
            }
            continue;
        }
        // Many rows: `fold_chunks` folds the partials, all elements in parallel. Few: the
        // consumers (named barrier 1: the producer warp does not take part) agree on the last
        // arrival at the feature tile, which folds.
        if (counters == nullptr) continue;
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
        if (threadIdx.x == 0) is_last = fold_arrive(&counters[ft]) == splits - 1;
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
        if (!is_last) continue;
        if constexpr (GLU == GLU_EXCHANGE) {
            // Gate's and up's columns of the pair's 64 features, each folded as `fold_chunks_glu`
            // folds them, and their SwiGLU.
            for (int j = threadIdx.x; j < num_rows * 64; j += 256) {
                const int n = j / 64, m = ft * 64 + j % 64;
                if (m < n0) glu_fold_store(part, out0, xb, num_rows, n0, num_chunks, n, m);
            }
            if (threadIdx.x == 0) counters[ft] = 0;
            continue;
        }
        for (int j = threadIdx.x; j < num_rows * FT; j += 256) {
            const int n = j / FT, m = sg.u * FT + j % FT;
            if (m >= n_out) continue;
            const int f_all = pick3(sg.s, 0, n0, n0 + n1);
            store_out(out + (u64)n * n_out + m,
                      fold_column(part + (u64)n * n_all + f_all + m, (u64)num_rows * n_all, num_chunks), resid);
        }
        if (threadIdx.x == 0) counters[ft] = 0;
    }
    if constexpr (CL > 1) cluster_sync();
#endif
}

// One kernel per row tile N, feature tile FT and fold chunk (SPC stages: 256 of K, or 1,024 for
// the `_k1024` instances); the chunk's stages are unrolled (a loop over them spilled the
// accumulators of the 64-row instance at its 96 registers).
#define LINEAR_TMA(N, FT, SPC, NAME, BLOCKS) LINEAR_TMA_G(N, FT, SPC, 1, GLU_NONE, false, NAME, BLOCKS)
#define LINEAR_TMA_CL(N, FT, SPC, CL, NAME, BLOCKS) LINEAR_TMA_G(N, FT, SPC, CL, GLU_NONE, false, NAME, BLOCKS)
#define LINEAR_TMA_G(N, FT, SPC, CL, GLU, NRM, NAME, BLOCKS)                                                        \
    extern "C" __global__ void __launch_bounds__(tma_threads(N), BLOCKS) linear_tma_bf16_##NAME(                    \
        const __grid_constant__ TmaMap xmap, const __grid_constant__ TmaMap wmap0,                                   \
        const __grid_constant__ TmaMap wmap1, const __grid_constant__ TmaMap wmap2, float* out0, float* out1,        \
        float* out2, int num_rows, int n0, int n1, int n2, int k_in, int chunks_per_split, float* __restrict__ part, \
        u32* __restrict__ counters, int resid, unsigned short* __restrict__ xb, const float* __restrict__ nx,         \
        const float* __restrict__ nw, float eps) { TL_BLOCK();                                                       \
        PDL_LAUNCH(); /* linear_tma waits (PDL_WAIT) once its first weight tiles are asked for */                  \
        linear_tma<N, FT, SPC, CL, GLU, NRM>(xmap, wmap0, wmap1, wmap2, out0, out1, out2, num_rows, n0, n1, n2,      \
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
    LINEAR_TMA_G(N, 128, 16, 2, GLU_IL, false, NAME##_gli_c2_k1024, BLOCKS)   \
    LINEAR_TMA_G(N, 128, 4, 4, GLU_IL, false, NAME##_gli_c4, BLOCKS)       \
    LINEAR_TMA_G(N, 128, 16, 4, GLU_IL, false, NAME##_gli_c4_k1024, BLOCKS)
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
// Two row tiles by two feature tiles a cluster of four (`PLUMB_CUDA_TMA_CLUSTER_PREFILL=4`).
LINEAR_TMA_CL(128, 128, 4, 4, n128_c4, 1)
LINEAR_TMA_CL(128, 128, 16, 4, n128_c4_k1024, 1)
LINEAR_TMA_CL(192, 128, 4, 4, n192_c4, 1)
LINEAR_TMA_CL(192, 128, 16, 4, n192_c4_k1024, 1)
LINEAR_TMA_GLU(8, n8, 2)
LINEAR_TMA_GLU(16, n16, 2)
LINEAR_TMA_GLU(32, n32, 2)
LINEAR_TMA_GLU(64, n64, 2)
LINEAR_TMA_GLI(128, n128, 1)
LINEAR_TMA_GLI(192, n192, 1)
LINEAR_TMA_NORM(8, n8, 2)
