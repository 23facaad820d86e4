// linear on the tensor cores, for bf16 weights whose K is a multiple of 8: out[n, m] = sum_k
// bf16(x[n, k]) * w[m, k]. The declared precision (CudaBackend::linear_inputs): each activation
// is rounded to bf16 (to nearest, ties to even; `round_bf16`, once per call) before the
// products, as every bf16 engine does; products and sums are fp32.
//
// The canonical arithmetic of one output element, fixed by K alone (GPU.md's chunked-K fold):
// K is cut into chunks of 256 (the last may be shorter; elements past K count as 0 * 0). Chunk c's
// partial is 16 `mma.sync.m16n8k16` steps s = 0..15 in ascending order, the first onto a zero
// accumulator. Step s multiplies the 16 chunk elements 32*(s/2) + 8*t + 4*(s%2) + {0, 1, 2, 3}
// (t = 0..3) placed at the instruction's k positions {2t, 2t+1, 2t+8, 2t+9}: so each thread's
// weights are 16 contiguous bytes of a row. The element is the left fold p0, p0+p1,
// (p0+p1)+p2, ... in ascending chunk order (__fadd_rn).
// An mma computes each output element from its own row of A and column of B alone, so which
// tokens share an instruction (the token tile, the padding past the last row) changes no bit:
// row r of a batch of M equals that row alone, and both kernels below — the split one for few
// rows, the register fold for many — compute the same partials and fold them the same way.

#define MMA_KC 256
#define MMA_WARPS 8

// float -> bf16 bits, round to nearest even (NaN stays a quiet NaN).
__device__ __forceinline__ u32 bf16_bits(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// The activations as the products take them: xb[i] = bf16(x[i]), 8 per thread (n % 8 == 0).
extern "C" __global__ void round_bf16(const float* __restrict__ x, uint4* __restrict__ xb, u64 n8) {
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    const float4 lo = ((const float4*)x)[2 * i], hi = ((const float4*)x)[2 * i + 1];
    xb[i] = make_uint4(bf16_bits(lo.x) | bf16_bits(lo.y) << 16, bf16_bits(lo.z) | bf16_bits(lo.w) << 16,
                       bf16_bits(hi.x) | bf16_bits(hi.y) << 16, bf16_bits(hi.z) | bf16_bits(hi.w) << 16);
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The weights of one chunk for this thread: rows ra and rb (features g and g+8 of the tile),
// 8 elements each at 32*i + 8*t for i = 0..7; zeros past the chunk's end.
__device__ __forceinline__ void load_chunk(const u8* __restrict__ w, u64 row_bytes, int ra, int rb, int c0, int clen,
                                           int t, uint4 (&wa)[8], uint4 (&wb)[8]) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int kk = 32 * i + 8 * t;
        const bool in = kk < clen;
        wa[i] = in ? __ldg((const uint4*)(w + (u64)ra * row_bytes + (u64)(c0 + kk) * 2)) : zero;
        wb[i] = in ? __ldg((const uint4*)(w + (u64)rb * row_bytes + (u64)(c0 + kk) * 2)) : zero;
    }
}

// One chunk's partial for one token column (xr: the token's bf16 row at the chunk start, or null
// for a token past the last row, which reads as zeros).
__device__ __forceinline__ void chunk_partial(const u8* __restrict__ xr, int clen, int t, const uint4 (&wa)[8],
                                              const uint4 (&wb)[8], float (&d)[4]) {
    d[0] = d[1] = d[2] = d[3] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int kk = 32 * i + 8 * t;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (xr != nullptr && kk < clen) v = __ldg((const uint4*)(xr + kk * 2));
        mma_bf16(d, wa[i].x, wb[i].x, wa[i].y, wb[i].y, v.x, v.y);
        mma_bf16(d, wa[i].z, wb[i].z, wa[i].w, wb[i].w, v.z, v.w);
    }
}

// Few rows (decode, verify): a block takes 16 features of `groups_per_block` token groups of 8
// rows (block x: which groups);
// its warps take the K chunks (warp w: chunks w, w+8, ...), holding a chunk's weights in
// registers across the token groups; partials go to shared memory ([chunk][feature][row], sized
// by the launch) and one thread per (feature, row) folds them in chunk order.
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32)
    linear_mma_split_bf16(const u8* __restrict__ x, const u8* __restrict__ w, u64 row_bytes,
                          float* __restrict__ out, int num_rows, int n_out, int k_in, int groups_per_block) {
    extern __shared__ float part[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int f0 = blockIdx.y * 16, r0 = blockIdx.x * 8 * groups_per_block;
    const int rows = min(8 * groups_per_block, num_rows - r0);
    const int groups = (rows + 7) / 8, cols = 8 * groups;
    const int num_chunks = (k_in + MMA_KC - 1) / MMA_KC;
    const int ra = min(f0 + g, n_out - 1), rb = min(f0 + g + 8, n_out - 1);
    for (int c = warp; c < num_chunks; c += MMA_WARPS) {
        const int c0 = c * MMA_KC, clen = min(MMA_KC, k_in - c0);
        uint4 wa[8], wb[8];
        load_chunk(w, row_bytes, ra, rb, c0, clen, t, wa, wb);
        for (int grp = 0; grp < groups; grp++) {
            const int tok = r0 + grp * 8 + g;
            float d[4];
            chunk_partial(tok < num_rows ? x + ((u64)tok * k_in + c0) * 2 : nullptr, clen, t, wa, wb, d);
            float* p = part + (u64)c * 16 * cols + grp * 8 + 2 * t;
            p[g * cols] = d[0];
            p[g * cols + 1] = d[1];
            p[(g + 8) * cols] = d[2];
            p[(g + 8) * cols + 1] = d[3];
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 16 * rows; i += blockDim.x) {
        const int f = i / rows, r = i % rows;
        const int m = f0 + f;
        if (m < n_out) {
            float acc = part[f * cols + r];
            for (int c = 1; c < num_chunks; c++) acc = __fadd_rn(acc, part[((u64)c * 16 + f) * cols + r]);
            out[(u64)(r0 + r) * n_out + m] = acc;
        }
    }
}

// Many rows (prefill): a block takes 128 features (16 per warp) of 64 rows and walks all of K in
// half chunks of 128, staged in shared memory by cp.async two stages deep (weights and rows as
// bf16). Each warp keeps a chunk's partial and the running fold in registers: the same partials
// as above, folded the same way.
#define TM_FEAT 128
#define TM_TOK 64
#define TM_HALF 128
#define TM_STRIDE 160  // bf16 per staged row: 128 + 32 (64 bytes: no bank conflicts)
#define TM_WBYTES (TM_FEAT * TM_STRIDE * 2)
#define TM_XBYTES (TM_TOK * TM_STRIDE * 2)

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    u32 dst;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(dst) : "l"(smem));
    const int bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes));
}

extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32)
    linear_mma_bf16(const u8* __restrict__ x, const u8* __restrict__ w, u64 row_bytes, float* __restrict__ out,
                    int num_rows, int n_out, int k_in) {
    extern __shared__ __align__(16) u8 smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int f0 = blockIdx.y * TM_FEAT, r0 = blockIdx.x * TM_TOK;
    const int num_chunks = (k_in + MMA_KC - 1) / MMA_KC, stages = 2 * num_chunks;

    // Stage s (half chunk s) into buffer s % 2: 16-byte pieces, 16 per row; zeros past the
    // last feature, the last row and K.
    auto issue = [&](int s) {
        u8* ws = smem + (s & 1) * (TM_WBYTES + TM_XBYTES);
        u8* xs = ws + TM_WBYTES;
        const int k0 = s * TM_HALF;
        for (int i = threadIdx.x; i < (TM_FEAT + TM_TOK) * 16; i += blockDim.x) {
            const int row = i / 16, k = k0 + (i % 16) * 8;
            if (row < TM_FEAT) {
                const int m = f0 + row;
                const u8* src = w + (u64)min(m, n_out - 1) * row_bytes + (u64)min(k, k_in - 8) * 2;
                cp_async16(ws + (row * TM_STRIDE + (i % 16) * 8) * 2, src, m < n_out && k < k_in);
            } else {
                const int r = r0 + row - TM_FEAT;
                const u8* src = x + ((u64)min(r, num_rows - 1) * k_in + min(k, k_in - 8)) * 2;
                cp_async16(xs + ((row - TM_FEAT) * TM_STRIDE + (i % 16) * 8) * 2, src, r < num_rows && k < k_in);
            }
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };

    float acc[8][4], d[8][4];
    issue(0);
    for (int s = 0; s < stages; s++) {
        if (s + 1 < stages) {
            issue(s + 1);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads();
        const u8* ws = smem + (s & 1) * (TM_WBYTES + TM_XBYTES);
        const u8* xs = ws + TM_WBYTES;
        if ((s & 1) == 0) {
#pragma unroll
            for (int grp = 0; grp < 8; grp++) d[grp][0] = d[grp][1] = d[grp][2] = d[grp][3] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int kk = 32 * i + 8 * t;
            const uint4 wa = *(const uint4*)(ws + ((warp * 16 + g) * TM_STRIDE + kk) * 2);
            const uint4 wb = *(const uint4*)(ws + ((warp * 16 + g + 8) * TM_STRIDE + kk) * 2);
#pragma unroll
            for (int grp = 0; grp < 8; grp++) {
                const uint4 v = *(const uint4*)(xs + ((grp * 8 + g) * TM_STRIDE + kk) * 2);
                mma_bf16(d[grp], wa.x, wb.x, wa.y, wb.y, v.x, v.y);
                mma_bf16(d[grp], wa.z, wb.z, wa.w, wb.w, v.z, v.w);
            }
        }
        if (s & 1) {
#pragma unroll
            for (int grp = 0; grp < 8; grp++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[grp][e] = s == 1 ? d[grp][e] : __fadd_rn(acc[grp][e], d[grp][e]);
        }
        __syncthreads();
    }
    const int ma = f0 + warp * 16 + g, mb = ma + 8;
#pragma unroll
    for (int grp = 0; grp < 8; grp++) {
        const int n = r0 + grp * 8 + 2 * t;
        if (n < num_rows) {
            if (ma < n_out) out[(u64)n * n_out + ma] = acc[grp][0];
            if (mb < n_out) out[(u64)n * n_out + mb] = acc[grp][2];
        }
        if (n + 1 < num_rows) {
            if (ma < n_out) out[(u64)(n + 1) * n_out + ma] = acc[grp][1];
            if (mb < n_out) out[(u64)(n + 1) * n_out + mb] = acc[grp][3];
        }
    }
}
