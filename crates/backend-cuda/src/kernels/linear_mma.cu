// linear on the tensor cores, for bf16 weights whose K is a multiple of 32: out[n, m] = sum_k
// bf16(x[n, k]) * w[m, k]. The declared precision (CudaBackend::linear_inputs): each activation
// is rounded to bf16 (to nearest, ties to even; `round_bf16`, once per call) before the
// products, as every bf16 engine does; products and sums are fp32.
//
// The canonical arithmetic of one output element, fixed by K alone (GPU.md's chunked-K fold):
// K is cut into chunks of kc elements, kc = 256, or 1,024 from K = 4,096 on (`ops_linear::fold_chunk`:
// long K in long chunks, so a split K's partials and a whole K's folds stay few; the last chunk
// may be shorter and elements past K count as 0 * 0). Chunk c's partial is kc / 16 k16 tensor-core steps s = 0, 1, ...
// in ascending order, the first onto a zero accumulator. Step s multiplies the 16 chunk elements
// 32*(s/2) + 8*t + 4*(s%2) + {0, 1, 2, 3} (t = 0..3) placed at the instruction's k positions
// {2t, 2t+1, 2t+8, 2t+9}. The element is the
// left fold 0+p0, (0+p0)+p1, ... in ascending chunk order (__fadd_rn; the leading 0 + p0 only
// turns a -0 partial into +0, whichever way a kernel's first step treats its zero accumulator).
// An mma computes each output element from its own row of A and column of B alone, so which
// tokens share an instruction (the token tile, the padding past the last row) changes no bit:
// row r of a batch of M equals that row alone. The decode kernel below (mma.sync, few rows) and
// the wgmma kernel of linear_wgmma.cu (many rows) compute the same partials and fold them the
// same way; an mma.sync step and a wgmma step with the same elements at the same k positions give
// the same bits on Hopper (tests/mma_probe.rs).
//
// Storage (`kperm`): bf16 weights and the rounded activations are kept k-permuted, so that each
// 16-byte piece holds one half of one step: in every group of 32 elements (16 words of two),
// word j = 4t + c sits at word 4c + t. Piece p of a group is then half p % 2 of the group's step
// p / 2, positions 0..7 in order: wgmma stages whole pieces, and the mma.sync fragments (thread t
// takes words {t, 4+t, 8+t, 12+t}) hold the same elements as 16 unpermuted bytes did.

// The shortest fold chunk, and the unit the decode kernel below stages K in.
#define MMA_KC 256

// The stored index of element k of a k-permuted row.
__device__ __forceinline__ int kperm(int k) {
    const int j = (k % 32) / 2;
    return (k / 32) * 32 + 2 * (4 * (j % 4) + j / 4) + k % 2;
}

// The activations as the products take them, k-permuted: group i of 32 (one thread each; rows
// are whole groups) of x rounded to bf16, word j = 4t + c stored at word 4c + t.
extern "C" __global__ void round_bf16(const float* __restrict__ x, u32* __restrict__ xb, u64 n32) { TL_BLOCK();
    PDL_ENTRY();
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n32) return;
    const float4* src = (const float4*)(x + 32 * i);
    u32 words[16];
#pragma unroll
    for (int q = 0; q < 8; q++) {
        const float4 v = src[q];
        words[2 * q] = bf16_bits(v.x) | bf16_bits(v.y) << 16;
        words[2 * q + 1] = bf16_bits(v.z) | bf16_bits(v.w) << 16;
    }
    uint4* dst = (uint4*)(xb + 16 * i);
#pragma unroll
    for (int c = 0; c < 4; c++) dst[c] = make_uint4(words[c], words[4 + c], words[8 + c], words[12 + c]);
}

// Elements k of a k-permuted bf16 row (the embedding of a table the tensor cores also read).
extern "C" __global__ void embed_bf16_kperm(const u32* __restrict__ ids, const u8* __restrict__ table, u64 row_bytes,
                                            float* __restrict__ out, int cols) { TL_BLOCK();
    PDL_ENTRY();
    const unsigned short* row = (const unsigned short*)(table + (u64)ids[blockIdx.x] * row_bytes);
    for (int k = threadIdx.x; k < cols; k += blockDim.x)
        out[(u64)blockIdx.x * cols + k] = __uint_as_float((u32)row[kperm(k)] << 16);
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// A 16-byte copy to shared address `dst` of the first `bytes` (0..16) bytes at `gmem`, zeros after.
__device__ __forceinline__ void cp_async16_n(u32 dst, const void* gmem, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes));
}

// A 16-byte copy to shared address `dst` (zeros when !valid).
__device__ __forceinline__ void cp_async16_at(u32 dst, const void* gmem, bool valid) {
    cp_async16_n(dst, gmem, valid ? 16 : 0);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    u32 dst;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(dst) : "l"(smem));
    const int bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes));
}

// Staged rows of 512 bytes (a unit of 256 bf16): piece p of row r sits at p ^ (r % 8), so the 8
// rows an ldmatrix phase reads hit 8 distinct 16-byte bank groups.
#define DEC_FEAT 64
#define DEC_ROW_BYTES (MMA_KC * 2)

__device__ __forceinline__ int dec_at(int r, int p) { return r * DEC_ROW_BYTES + ((p ^ (r & 7)) << 4); }

// Few rows (decode, verify; at most 64): a block takes 64 features (16 per warp) of every row over
// the chunks [split * chunks_per_split, ...) of K. The 64 weight rows and the rows of x are staged
// 256 of K at a time by cp.async, two units deep, into shared memory (512-byte rows, pieces
// swizzled as above) and read into mma fragments by ldmatrix. With one split the block folds its chunks in
// registers; with several, each chunk's partial goes to `part` ([chunk][row][feature]) and the
// last block of a feature tile to arrive (`counters` count arrivals, never add values; that block
// resets its counter to zero) folds them in chunk order. TW warps share each 16 features, warp
// w taking the 8-row groups w / 4, w / 4 + TW, ...: the wide form (TW = 2, 256 threads) halves each
// warp's chain of dependent mma steps where the rows' staging leaves one block per SM. Which warp
// computes a group changes no operation of it.
template <int TW>
__device__ __forceinline__ void linear_mma_decode(const u8* __restrict__ x, const u8* __restrict__ w, u64 row_bytes,
                                                  float* __restrict__ out, int num_rows, int n_out, int k_in,
                                                  int kc, int chunks_per_split, float* __restrict__ part,
                                                  u32* __restrict__ counters) {
    constexpr int NT = 128 * TW;
    extern __shared__ __align__(128) u8 smem[];
    __shared__ int is_last;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int fw = warp % 4, tw = warp / 4;
    const int f0 = blockIdx.x * DEC_FEAT;
    // The block stages K in units of MMA_KC (256), `upc` of them a chunk (kc, the weight's fold
    // chunk: ops_linear::fold_chunk); a chunk's partial runs on over its units.
    const int num_chunks = (k_in + kc - 1) / kc, upc = kc / MMA_KC;
    const int num_units = (k_in + MMA_KC - 1) / MMA_KC;
    const int c_lo = blockIdx.y * chunks_per_split, c_hi = min(num_chunks, c_lo + chunks_per_split);
    const int u_lo = c_lo * upc, u_hi = min(num_units, c_hi * upc);
    const int groups = (num_rows + 7) / 8;
    const int stage_bytes = (DEC_FEAT + 8 * groups) * DEC_ROW_BYTES;
    const bool split = gridDim.y > 1;

    // Unit v into buffer b: weight rows 0..63, then 8 * groups rows of x (zeros past the last row
    // and K); consecutive threads take consecutive pieces of a row.
    auto issue = [&](int v, int b) {
        u8* st = smem + b * stage_bytes;
        const int k0 = v * MMA_KC;
        for (int i = threadIdx.x; i < (DEC_FEAT + 8 * groups) * 32; i += NT) {
            const int r = i / 32, p = i % 32, k = k0 + 8 * p;
            const bool kin = k < k_in;
            if (r < DEC_FEAT) {
                const int m = f0 + r;
                cp_async16(st + dec_at(r, p), w + (u64)min(m, n_out - 1) * row_bytes + (u64)min(k, k_in - 8) * 2,
                           m < n_out && kin);
            } else {
                const int tok = r - DEC_FEAT;
                cp_async16(st + dec_at(r, p), x + ((u64)min(tok, num_rows - 1) * k_in + min(k, k_in - 8)) * 2,
                           tok < num_rows && kin);
            }
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };

    float acc[8 / TW][4], d[8 / TW][4];
    issue(u_lo, 0);
    for (int v = u_lo; v < u_hi; v++) {
        const int b = (v - u_lo) & 1, c = v / upc;
        // Whether unit v starts its chunk's partial (onto zeroed accumulators) or ends it.
        const bool first = v % upc == 0, last = v % upc == upc - 1 || v == u_hi - 1;
        if (v + 1 < u_hi) {
            issue(v + 1, b ^ 1);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads();
        const u32 st = smem_addr(smem + b * stage_bytes);
        // This warp's 16 features for all 16 steps: lane l addresses feature row
        // 16 fw + l % 8 + 8 ((l / 8) % 2), piece 2 s + l / 16 (a0 a1 a2 a3 of mma_bf16).
        u32 a[16][4];
        const int ar = 16 * fw + (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
        for (int s = 0; s < 16; s++) ldmatrix_x4(a[s], st + dec_at(ar, 2 * s + (lane >> 4)));
#pragma unroll
        for (int gi = 0; gi < 8 / TW; gi++) {
            const int grp = tw + TW * gi;
            if (grp >= groups) break;
            if (first) {
#pragma unroll
                for (int e = 0; e < 4; e++) d[gi][e] = 0.0f;
            }
            // Rows of x: lane l addresses token 8 grp + l % 8, piece 2 s + l / 8 (two steps).
            const int br = DEC_FEAT + 8 * grp + (lane & 7);
#pragma unroll
            for (int s = 0; s < 16; s += 2) {
                u32 bf[4];
                ldmatrix_x4(bf, st + dec_at(br, 2 * s + (lane >> 3)));
                mma_bf16(d[gi], a[s][0], a[s][1], a[s][2], a[s][3], bf[0], bf[1]);
                mma_bf16(d[gi], a[s + 1][0], a[s + 1][1], a[s + 1][2], a[s + 1][3], bf[2], bf[3]);
            }
            if (!last) continue;
            if (split) {
                const int fa = f0 + 16 * fw + g, tok = 8 * grp + 2 * t;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int f = fa + 8 * (e / 2), n = tok + e % 2;
                    if (f < n_out && n < num_rows) part[((u64)c * num_rows + n) * n_out + f] = d[gi][e];
                }
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) acc[gi][e] = __fadd_rn(c == c_lo ? 0.0f : acc[gi][e], d[gi][e]);
            }
        }
        __syncthreads();  // every warp is done with buffer b before it is restaged
    }
    if (!split) {
#pragma unroll
        for (int gi = 0; gi < 8 / TW; gi++) {
            const int grp = tw + TW * gi;
            if (grp >= groups) break;
            const int fa = f0 + 16 * fw + g, tok = 8 * grp + 2 * t;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int f = fa + 8 * (e / 2), n = tok + e % 2;
                if (f < n_out && n < num_rows) out[(u64)n * n_out + f] = acc[gi][e];
            }
        }
        return;
    }
    __syncthreads();
    if (threadIdx.x == 0) is_last = fold_arrive(&counters[blockIdx.x]) == gridDim.y - 1;
    __syncthreads();
    if (!is_last) return;
    for (int i = threadIdx.x; i < num_rows * DEC_FEAT; i += NT) {
        const int n = i / DEC_FEAT, f = f0 + i % DEC_FEAT;
        if (f >= n_out) continue;
        float v = __fadd_rn(0.0f, __ldcg(part + (u64)n * n_out + f));
        for (int c = 1; c < num_chunks; c++) v = __fadd_rn(v, __ldcg(part + ((u64)c * num_rows + n) * n_out + f));
        out[(u64)n * n_out + f] = v;
    }
    if (threadIdx.x == 0) counters[blockIdx.x] = 0;
}

extern "C" __global__ void __launch_bounds__(128, 1)
    linear_mma_decode_bf16(const u8* __restrict__ x, const u8* __restrict__ w, u64 row_bytes, float* __restrict__ out,
                           int num_rows, int n_out, int k_in, int kc, int chunks_per_split,
                           float* __restrict__ part, u32* __restrict__ counters) { TL_BLOCK();
    PDL_ENTRY();
    linear_mma_decode<1>(x, w, row_bytes, out, num_rows, n_out, k_in, kc, chunks_per_split, part, counters);
}

extern "C" __global__ void __launch_bounds__(256, 1)
    linear_mma_decode_wide_bf16(const u8* __restrict__ x, const u8* __restrict__ w, u64 row_bytes,
                                float* __restrict__ out, int num_rows, int n_out, int k_in, int kc,
                                int chunks_per_split, float* __restrict__ part, u32* __restrict__ counters) { TL_BLOCK();
    PDL_ENTRY();
    linear_mma_decode<2>(x, w, row_bytes, out, num_rows, n_out, k_in, kc, chunks_per_split, part, counters);
}
