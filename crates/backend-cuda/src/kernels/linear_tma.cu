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
// Stages of the instances whose clusters of KS CTAs split K (`ks_fold_chunk`): as many as keep
// two blocks an SM with rank 0's slots and a GLU exchange, but for 128-feature tasks of 32 and 64
// rows split in four (their slots alone take 48 and 96 KB: one block an SM). 64-feature tasks
// (plain products of 32 and 64 rows, `_f64_s*`): six, but five for 64 rows split in two and three
// in four. `tma::tma_stages_ks` is the same table.
__host__ __device__ constexpr int tma_stages_ks(int n, int ft, int ks) {
    return ft == 64 ? (n == 64 ? (ks == 2 ? 5 : 3) : 6)
                    : n == 8 ? 5 : n == 16 ? (ks == 2 ? 5 : 4) : n == 32 ? 4 : ks == 2 ? 3 : 4;
}
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
template <int N, int FT, int SPC, int CL, int KS, int GLU, bool NRM>
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
    constexpr int STAGES = KS > 1 ? tma_stages_ks(N, FT, KS) : tma_stages(N, FT), STAGE = tma_stage_bytes(N, FT), KC = SPC * WG_KS;
    constexpr int NW = FT == 128 ? N : N / 2, W_BYTES = FT * 128;
    // NRM: the producer copies only the weight tile; the consumers write x's (`tma_norm_write`).
    constexpr int TX = NRM ? W_BYTES : STAGE;
    static_assert(!NRM || (FT == 128 && CL == 1), "the norm inside: 128 features a task, one CTA");
    static_assert(FT == 128 || (FT == 64 && N >= 16), "64-feature tasks split at least 16 rows");
    // CL: CTAs of a cluster (1 or 2). Two take a pair of feature tiles of the same rows and K, in
    // lockstep, and each copies half of the rows of x to both (`multicast`): x crosses from L2 once
    // a pair instead of once a tile. Only where bytes land: the same arithmetic, the same bits.
    // (Clusters of four, two row tiles by two feature tiles sharing x and the weight tile, ran at
    // 0.38-0.44 of cuBLASLt at 2,048 rows against 0.61-0.81 in pairs on an H100: session 34.)
    static_assert(CL == 1 || CL == 2, "clusters of one or two CTAs");
    constexpr int X_ROWS = CL == 1 ? N : N / 2;  // rows of x this CTA copies each stage
    constexpr int FG = CL;                       // feature tiles a cluster
    const int rank = CL > 1 ? (int)(blockIdx.x % CL) : 0;
    // KS: CTAs of a cluster splitting each task's K (`ks_fold_chunk`: 1, 2 or 4), rank `krank`
    // taking every KS-th chunk; decode rows, one CTA along the features, of 128-feature tasks or
    // (plain products) 64-feature ones, whose warpgroups fold their own halves of the rows.
    static_assert(KS == 1 || KS == 2 || KS == 4, "K split over one, two or four CTAs");
    static_assert(KS == 1 || (CL == 1 && N <= 64 && GLU != GLU_IL && !NRM), "K split: decode rows");
    static_assert(KS == 1 || FT == 128 || GLU == GLU_NONE, "K split on 64-feature tasks: plain products");
    const int krank = KS > 1 ? (int)(blockIdx.x % KS) : 0;
    extern __shared__ __align__(128) u8 smem[];
    // KS > 1: two more, `kfull` (rank 0: the other ranks' sums of a round landed) and `kfree`
    // (the others: rank 0 has read this rank's slot).
    __shared__ __align__(8) u64 bars[2 * STAGES + (KS > 1 ? 2 : 0)];
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
    const int tasks = row_tiles * splits * ((all_tiles + FG - 1) / FG);
    const bool split = splits > 1;
    // Task t (row tiles fastest, so blocks running together share a weight tile): rows r0.., the
    // chunks of one split, FT features from f0. The block walks tasks blockIdx.x, + gridDim.x, …
    // (persistent: the producer stages the next task while the consumers store this one); a
    // cluster walks its tasks together. `own`: false for the second rank of a pair past the last
    // tile, which stages and computes the last tile again (its peer needs its half of x) and
    // stores nothing.
    const int first = (int)blockIdx.x / (CL * KS), stride = (int)gridDim.x / (CL * KS);
    auto task = [&](int t, int& r0, int& c_lo, int& c_hi, int& ft, bool& own) {
        r0 = (t % row_tiles) * N;
        const int rest = t / row_tiles;
        c_lo = (rest % splits) * chunks_per_split;
        c_hi = min(num_chunks, c_lo + chunks_per_split);
        ft = FG * (rest / splits) + rank;
        own = ft < all_tiles;
        ft = min(ft, all_tiles - 1);
    };
    if (threadIdx.x == 0) {
        for (int b = 0; b < STAGES; b++) {
            mbar_init(full0 + 8 * b, 1);
            // Every consumer warp of the cluster releases a stage: a CTA's copy of x lands in all.
            mbar_init(empty0 + 8 * b, 8 * CL);
        }
        if constexpr (KS > 1) {
            mbar_init(full0 + 8 * 2 * STAGES, 1);
            mbar_init(full0 + 8 * (2 * STAGES + 1), 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if constexpr (CL * KS > 1) cluster_sync();  // the peers' barriers exist before any copy lands there

    // Stage s of feature tile ft's weight rows into dst: one box of FT rows of its weight, or
    // under `glu` the tile's 64 rows of gate and, 8 KB on, the same 64 of up, or (GLU_IL) for
    // each warpgroup h and warp w, gate's 8 rows of features 32 h + 8 w .. and up's same 8 after
    // them (each 8 rows one 1,024-byte swizzle atom: the layout one box of 64 rows would give),
    // all in one box of the rank-4 pair map.
    auto load_w = [&](u32 dst, int s, int ft, u32 full) {
        if constexpr (GLU == GLU_IL) {
            // One box of the pair map (tma::bf16_pair_map): groups ft * 8 .. ft * 8 + 7 of 8
            // features, each gate's 8 rows then up's.
            tma_load_4d(dst, &wmap0, s * WG_KS, 0, 0, ft * 8, full);
            return;
        }
        if constexpr (GLU == GLU_EXCHANGE) {
            tma_load_2d(dst, &wmap0, s * WG_KS, ft * 64, full);
            tma_load_2d(dst + 64 * 128, &wmap1, s * WG_KS, ft * 64, full);
            return;
        }
        const Seg sg = seg_of(ft, FT, n0, n1);
        tma_load_2d(dst, pick3(sg.s, &wmap0, &wmap1, &wmap2), s * WG_KS, sg.u * FT, full);
    };
    // KS > 1: how many stages of 64 of K this rank takes of a task over chunks [c_lo, c_hi) (those
    // of its chunks), and the j-th of them.
    auto ks_stages = [&](int c_lo, int c_hi) { return max(0, (c_hi - c_lo - krank + KS - 1) / KS) * SPC; };
    auto ks_stage = [&](int c_lo, int j) { return (c_lo + krank + (j / SPC) * KS) * SPC + j % SPC; };
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
                if constexpr (KS == 1) {
                    for (int s = c_lo * SPC; s < c_hi * SPC && early < STAGES; s++, early++) {
                        mbar_expect_tx(full0 + 8 * early, TX);
                        load_w(base + early * STAGE, s, ft, full0 + 8 * early);
                    }
                } else {
                    for (int j = 0; j < ks_stages(c_lo, c_hi) && early < STAGES; j++, early++) {
                        mbar_expect_tx(full0 + 8 * early, TX);
                        load_w(base + early * STAGE, ks_stage(c_lo, j), ft, full0 + 8 * early);
                    }
                }
            }
            PDL_WAIT();
            int i = 0;  // stages issued by this block, over all its tasks
            for (int t = first; t < tasks; t += stride) {
                int r0, c_lo, c_hi, ft;
                bool own;
                task(t, r0, c_lo, c_hi, ft, own);
                // KS > 1: this rank's chunks' stages only.
                const int j_end = KS == 1 ? c_hi * SPC : ks_stages(c_lo, c_hi);
                for (int j = KS == 1 ? c_lo * SPC : 0; j < j_end; j++, i++) {
                    const int b = i % STAGES, s = KS == 1 ? j : ks_stage(c_lo, j);
                    if (i >= STAGES) mbar_wait(empty0 + 8 * b, ((i / STAGES) + 1) & 1);
                    const u32 full = full0 + 8 * b, dst = base + b * STAGE;
                    if (i >= early) {
                        mbar_expect_tx(full, TX);
                        load_w(dst, s, ft, full);
                    }
                    if constexpr (CL > 1) {
                        tma_load_2d_multicast(dst + W_BYTES + rank * X_ROWS * 128, &xmap, s * WG_KS,
                                              r0 + rank * X_ROWS, full, 0x3);
                    } else if constexpr (!NRM) {
                        tma_load_2d(dst + W_BYTES, &xmap, s * WG_KS, r0, full);
                    }
                }
            }
        } else {
            PDL_WAIT();
        }
        if constexpr (CL * KS > 1) cluster_sync();  // no CTA leaves while a peer may still reach it
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
    };
    // KS > 1: the barriers and the slots of `ks_fold_chunk` (past the stages and a GLU exchange's
    // words, which rank 0 may still use while the others send their next task's sums).
    const u32 kfull = full0 + 8 * 2 * STAGES, kfree = kfull + 8;
    const u32 recv = base + STAGES * STAGE + (GLU == GLU_EXCHANGE ? GLU_XCH * 128 * 4 : 0);
    int krounds = 0, ksent = 0;
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
        for (int c = c_lo + krank; c < c_hi; c += KS) {
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
            } else if constexpr (KS > 1) {
                ks_fold_chunk<NW, KS>(acc, d, c == c_lo, krank, min(KS, c_hi - c) - 1, kfull, kfree, recv,
                                      smem + (recv - smem_addr(smem)), krounds, ksent);
            } else {
#pragma unroll
                for (int e = 0; e < NW / 2; e++) acc[e] = __fadd_rn(c == c_lo ? 0.0f : acc[e], d[e]);
            }
        }
        if constexpr (KS > 1)
            if (krank != 0) continue;  // rank 0 holds the task's fold
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
    if constexpr (CL * KS > 1) cluster_sync();
#endif
}
