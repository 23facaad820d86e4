// linear_replay_q8_0: the elements of linear_split and linear_wide for a Q8_0 weight of many
// features read by few rows (the default model's tied LM head, 49,152 × 576, at one row), with a
// thread a feature instead of a warp.
//
// A warp of linear_wide spends its instructions on what a warp needs to share a feature: each lane
// takes one element of every 32, so per element it loads a quant byte and a scale from shared
// memory, and each chunk ends in five dependent shuffles; its blocks wait on their rows' copies
// with a few warps an SM. Measured on the H200 at 47 µs for 30 MB (640 GB/s, Nsight: issue-bound).
// Here thread t of a block computes feature f0 + t alone, all 32 of a chunk's lane chains in its
// registers, and replays the warp's arithmetic exactly (opt-in, PLUMB_CUDA_WIDE_REPLAY=1: its first
// build ran 57.9 µs against linear_wide's 47.2 on an H100, session 19, with the 32 sums in local
// memory — a butterfly loop whose bounds ptxas could not see; these loops keep them in registers,
// 64 registers and no stack frame by NVRTC 13.0.88, not yet measured on a GPU):
//   - lane l's chain of chunk c: s_l = fmaf(x[e], w[e], s_l) for e = c·256 + 32j + l, j ascending,
//     from 0; an element past K is linear_split's fmaf(0, 0, s_l), s_l + (+0), which returns s_l
//     but for -0, which it makes +0 (a chain can hold -0: an fmaf whose exact result underflows
//     keeps its sign). The steps past K are left out for one __fadd_rn(s_l, 0) in their place
//     (after it, further zero steps change nothing);
//   - w[e] = deq<Q8_0>'s __fmul_rn((float)q, d): the int8 quant made a float exactly, as
//     __int_as_float(0x4B000000 | (q + 128)) - (2^23 + 128) (both sides exact integers in f32),
//     times the block's f16 scale widened by f16_to_f32;
//   - the xor butterfly (offsets 16, 8, 4, 2, 1): after offset o lane l holds s_l + s_{l^o}
//     (fadd commutes, so both lanes of a pair hold the same bits), and lane 0's value is the tree
//     `butterfly_replay` sums;
//   - the chunk partials folded left in ascending order, and `store_out`.
// So each element is bit-identical to linear_split's and linear_wide's, for every row count.
// The block's rows (contiguous: features f0 .. f0 + 31) come into shared memory by 16-byte
// cp.async before the wait on the kernel before (no kernel of a forward writes a weight), then x.
// Dynamic shared memory: LIN_REPLAY_FEAT rows of `row_bytes`, then num_rows × k_in floats of x.
#define LIN_REPLAY_FEAT 32

// (Five loops of constant bounds, so every index is known and s stays in registers.)
__device__ __forceinline__ float butterfly_replay(float (&s)[32]) {
#pragma unroll
    for (int l = 0; l < 16; l++) s[l] = __fadd_rn(s[l], s[l + 16]);
#pragma unroll
    for (int l = 0; l < 8; l++) s[l] = __fadd_rn(s[l], s[l + 8]);
#pragma unroll
    for (int l = 0; l < 4; l++) s[l] = __fadd_rn(s[l], s[l + 4]);
#pragma unroll
    for (int l = 0; l < 2; l++) s[l] = __fadd_rn(s[l], s[l + 2]);
    return __fadd_rn(s[0], s[1]);
}

// Quant e (0..3) of four packed int8 quants `u` (each byte already XOR 0x80, so q + 128), as f32.
__device__ __forceinline__ float q8_float(u32 u, int e) {
    return __int_as_float((int)(0x4B000000u | ((u >> (8 * e)) & 0xFFu))) - 8388736.0f;
}

extern "C" __global__ void __launch_bounds__(LIN_REPLAY_FEAT)
    linear_replay_q8_0(const float* x, const u8* w, u64 row_bytes, float* out, int num_rows, int n_out, int k_in,
                       int resid) { TL_BLOCK();
    PDL_LAUNCH();  // the wait (PDL_WAIT) follows the weight copies
    extern __shared__ __align__(16) u8 replay_smem[];
    const int t = threadIdx.x;
    const int f0 = blockIdx.x * LIN_REPLAY_FEAT;
    const int nf = min(LIN_REPLAY_FEAT, n_out - f0);
    const int bytes = nf * (int)row_bytes;
    const u8* src = w + (u64)f0 * row_bytes;
    const u32 dst = smem_addr(replay_smem);
    // Whole 16-byte pieces, the last zero-filled past the rows' bytes (the host checks alignment).
    for (int i = 16 * t; i < bytes; i += 16 * LIN_REPLAY_FEAT) cp_async16_n(dst + i, src + i, min(16, bytes - i));
    asm volatile("cp.async.commit_group;\n" ::);
    PDL_WAIT();
    float* xs = (float*)(replay_smem + LIN_REPLAY_FEAT * row_bytes);
    const float4* x4 = (const float4*)x;
    for (int i = t; i < num_rows * k_in / 4; i += LIN_REPLAY_FEAT) ((float4*)xs)[i] = x4[i];
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    if (t >= nf) return;
    const u32* row = (const u32*)(replay_smem + (u64)t * row_bytes);
    const int num_chunks = (k_in + LIN_KC - 1) / LIN_KC;
    for (int r = 0; r < num_rows; r++) {
        const float* xr = xs + (u64)r * k_in;
        float acc = 0.0f;
        for (int c = 0; c < num_chunks; c++) {
            const int c0 = c * LIN_KC, clen = min(LIN_KC, k_in - c0);
            float s[32];
#pragma unroll
            for (int l = 0; l < 32; l++) s[l] = 0.0f;
#pragma unroll
            for (int j = 0; j < LIN_KC / 32; j++) {
                if (32 * j >= clen) continue;  // a guard, not a break: the loop stays unrolled and s in registers
                // Block b = c0 / 32 + j (34 bytes: the f16 scale, then 32 quants) starts at byte 34b
                // of the row. With wd word 17 (b / 2): an even b (c0 / 32 is even, so b's parity is
                // j's) starts at byte 0 of wd[0], its quants from byte 2 (an even last block's
                // wd[8] reads two bytes past the row, still inside the block's shared memory); an
                // odd b at byte 2 of wd[8], its quants word-aligned from wd[9].
                const int b = c0 / 32 + j;
                const u32* wd = row + 17 * (b / 2);
                u32 q[8];
                float d;
                if (j % 2 == 0) {
                    d = f16_to_f32(wd[0] & 0xFFFFu);
#pragma unroll
                    for (int i = 0; i < 8; i++) q[i] = ((wd[i] >> 16) | (wd[i + 1] << 16)) ^ 0x80808080u;
                } else {
                    d = f16_to_f32(wd[8] >> 16);
#pragma unroll
                    for (int i = 0; i < 8; i++) q[i] = wd[9 + i] ^ 0x80808080u;
                }
                const float4* xv = (const float4*)(xr + c0 + 32 * j);
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const float4 xq = xv[i];
                    s[4 * i + 0] = fmaf(xq.x, __fmul_rn(q8_float(q[i], 0), d), s[4 * i + 0]);
                    s[4 * i + 1] = fmaf(xq.y, __fmul_rn(q8_float(q[i], 1), d), s[4 * i + 1]);
                    s[4 * i + 2] = fmaf(xq.z, __fmul_rn(q8_float(q[i], 2), d), s[4 * i + 2]);
                    s[4 * i + 3] = fmaf(xq.w, __fmul_rn(q8_float(q[i], 3), d), s[4 * i + 3]);
                }
            }
            if (clen < LIN_KC) {
#pragma unroll
                for (int l = 0; l < 32; l++) s[l] = __fadd_rn(s[l], 0.0f);  // the steps past K (above)
            }
            const float p = butterfly_replay(s);
            acc = c == 0 ? p : __fadd_rn(acc, p);
        }
        store_out(out + (u64)r * n_out + f0 + t, acc, resid);
    }
}
