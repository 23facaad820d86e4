// linear on Hopper's warpgroup MMA (wgmma), for many rows (prefill): the same canonical arithmetic
// as linear_mma.cu, whose comment defines it (chunks of 256, each chunk's partial 16 k16 steps in
// ascending order from zeroed accumulators, the left fold of the partials in chunk order), so
// this kernel and the mma.sync decode kernel give every element the same bits (tests/mma_probe.rs
// holds the fact this relies on: a wgmma k16 step equals an mma.sync one with the same elements at
// the same k positions).
//
// Operands are bf16 in the k-permuted layout (see `kperm` in linear_mma.cu): in each group of 32
// elements, the 16-byte pieces are the k16 steps' halves in order, so staging whole pieces puts
// every element at the k position the canonical form gives it.
//
// A block (two warpgroups, 256 threads) takes 128 features (64 per warpgroup: the wgmma M, weights
// as A) of 128 rows (the wgmma N, tokens as B) and walks K in stages of 64 (4 k16 steps), staged
// by cp.async WG_STAGES deep into core-matrix layout (8 rows x 16 bytes, no swizzle): a stage is
// [step][row group][k half][8 rows][16 bytes] for the weights, then the same for the tokens.
// Each warpgroup keeps its chunk partial (64 f32) and running fold (64 f32) in registers.

#define WG_FEAT 128
#define WG_TOK 128
#define WG_KS 64
#define WG_STAGES 6
#define WG_OPERAND_BYTES (128 * WG_KS * 2)
#define WG_STAGE_BYTES (2 * WG_OPERAND_BYTES)
// Descriptor offsets of the core-matrix layout: the two K halves of a step 128 bytes apart, the
// 8-row groups 256 bytes apart (which field is which: tests/mma_probe.rs).
#define WG_LBO 128
#define WG_SBO 256

__device__ __forceinline__ u64 wg_desc(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(WG_LBO >> 4) << 16) | ((u64)(WG_SBO >> 4) << 32);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// d[64] += A (64 x 16, descriptor da) * B (16 x 128, descriptor db): one m64n128k16 step.
__device__ __forceinline__ void wgmma_128(float (&d)[64], u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
        "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,"
        "%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db));
}
#endif

extern "C" __global__ void __launch_bounds__(256, 1)
    linear_wgmma_bf16(const u8* __restrict__ x, const u8* __restrict__ w, u64 row_bytes, float* __restrict__ out,
                      int num_rows, int n_out, int k_in, int kc) { TL_BLOCK();
    PDL_ENTRY();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(128) u8 smem[];
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int f0 = blockIdx.y * WG_FEAT, r0 = blockIdx.x * WG_TOK;
    // SPC: stages of a chunk of K (`kc`, the weight's fold chunk: ops_linear::fold_chunk).
    const int num_chunks = (k_in + kc - 1) / kc, SPC = kc / WG_KS;
    const int total = num_chunks * SPC;

    // Stage s into buffer s % WG_STAGES: 128 rows x 8 pieces of each operand. Thread i copies
    // piece (i / 8) % 8 of rows (i / 64) * 8 + i % 8 + 32 j, j = 0..3, so the 8 threads of a
    // quarter warp fill one 128-byte core-matrix half (no bank conflict) and each row's pieces
    // come from 64 contiguous bytes. Zeros past the last feature, the last row and K. Addresses
    // are worked out once: a stage only adds its K offset.
    const int p = (threadIdx.x / 8) % 8, row0 = (threadIdx.x / 64) * 8 + threadIdx.x % 8;
    const u32 dst0 = smem_addr(smem) + (p / 2) * 4096 + (row0 / 8) * 256 + (p % 2) * 128 + (row0 % 8) * 16;
    const u8* wsrc[4];
    const u8* xsrc[4];
    bool wok[4], xok[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int m = f0 + row0 + 32 * j, r = r0 + row0 + 32 * j;
        wsrc[j] = w + (u64)min(m, n_out - 1) * row_bytes + 16 * p;
        xsrc[j] = x + (u64)min(r, num_rows - 1) * k_in * 2 + 16 * p;
        wok[j] = m < n_out;
        xok[j] = r < num_rows;
    }
    auto issue = [&](int s) {
        const u32 st = dst0 + (s % WG_STAGES) * WG_STAGE_BYTES;
        const int k = s * WG_KS + 8 * p;
        const bool kin = k < k_in;
        // Past K the copy reads nothing (a zero-byte copy), from a valid address.
        const u64 kb = kin ? (u64)s * WG_KS * 2 : 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            cp_async16_at(st + 1024 * j, wsrc[j] + kb, wok[j] && kin);
            cp_async16_at(st + WG_OPERAND_BYTES + 1024 * j, xsrc[j] + kb, xok[j] && kin);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };

    float d[64], acc[64];
#pragma unroll
    for (int e = 0; e < 64; e++) acc[e] = 0.0f;
    for (int s = 0; s < WG_STAGES - 2; s++) {
        if (s < total) issue(s);
        else asm volatile("cp.async.commit_group;\n" ::);
    }
    // One chunk per outer iteration: its partial from zeroed accumulators over its stages, then
    // the fold; the accumulators are touched by nothing but wgmma between the two, so ptxas keeps
    // the wgmma pipeline (one stage's group in flight while the next is issued).
    for (int c = 0; c < num_chunks; c++) {
#pragma unroll
        for (int e = 0; e < 64; e++) d[e] = 0.0f;
        for (int q = 0; q < SPC; q++) {
            const int s = c * SPC + q;
            // Stage s has landed for every thread, and every warpgroup is done with stage s - 2.
            asm volatile("cp.async.wait_group %0;\n" ::"n"(WG_STAGES - 3));
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            __syncthreads();
            if (s + WG_STAGES - 2 < total) issue(s + WG_STAGES - 2);
            else asm volatile("cp.async.commit_group;\n" ::);
            const u32 base = smem_addr(smem + (s % WG_STAGES) * WG_STAGE_BYTES);
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int step = 0; step < WG_KS / 16; step++) {
                const u32 a = base + step * 4096 + wg * 2048, b = base + WG_OPERAND_BYTES + step * 4096;
                wgmma_128(d, wg_desc(a), wg_desc(b));
            }
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
        for (int e = 0; e < 64; e++) acc[e] = __fadd_rn(c == 0 ? 0.0f : acc[e], d[e]);
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
    // Element e of this thread: feature 16 * warp + g + 8 * ((e / 2) % 2) of the warpgroup's 64,
    // token 8 * (e / 4) + 2 * t + e % 2 of the block's 128.
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int e = 0; e < 64; e++) {
        const int m = f0 + 64 * wg + 16 * warp + g + 8 * ((e / 2) % 2);
        const int n = r0 + 8 * (e / 4) + 2 * t + e % 2;
        if (m < n_out && n < num_rows) out[(u64)n * n_out + m] = acc[e];
    }
#endif
}
