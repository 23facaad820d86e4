// linear_tile: linear's elements (linear.cu's canonical arithmetic) for many rows — prefill —
// on a register-tiled block, where `linear_body` spends a warp on each feature: per row and 256-
// element chunk its lanes load eight x values from shared memory for eight fmafs and end in five
// dependent shuffles, so it runs at a few percent of the f32 rate.
//
// Here a block of LIN_TILE_THREADS computes 16·RM rows × TILE_N features (RM = 4: 64 rows; RM = 2:
// 32, for launches whose 64-row tiles would leave SMs idle), each thread an RM × 4 piece, every
// element with linear.cu's operations:
//   - lane l's chain of chunk c: s_l = fmaf(x[e], w[e], s_l) for e = c·256 + 32j + l, j ascending,
//     from +0, elements past K as fmaf(0, 0, s_l). A thread computes the chains one lane after
//     another, each as 8 outer-product steps of its 4 × 4 piece, and leaves out the steps past
//     K whole chains share (j ≥ ceil(clen / 32)): fmaf(0, 0, s) is s + (+0), which is s except
//     that -0 becomes +0 (an fmaf that underflows to zero keeps the sign of its exact result, so a
//     chain can hold -0); one __fadd_rn(s, 0) stands for the steps left out, and further zero
//     steps change nothing.
//   - the xor butterfly (offsets 16, 8, 4, 2, 1): after offset o lane l holds s_l + s_{l^o}, both
//     lanes of a pair the same bits (fadd commutes). With the lanes taken in bit-reversed order
//     (0, 16, 8, 24, 4, ...), offset 16 pairs neighbours, offset 8 neighbouring pairs, and so on:
//     the butterfly's value is the balanced pairwise sum of the chains in that order, which the
//     thread forms as it goes, holding one pending node a level.
//   - the chunk partials folded left in ascending order, and `store_out`.
// So every element is bit-identical to linear_body's, linear_split's and linear_wide's: a row of
// a batch equals the row alone, for every batch size and tiling.
// Each chunk is staged whole in shared memory as four planes, plane q holding the elements
// e ≡ q (mod 4) of the chunk: lane l = 4u + q's chain is plane q's lines u, u + 8, ..., line j·8 + u
// holding element 32j + 4u + q of every row (x) or feature (w, dequantized by `deq`). Bit-reversed
// lane order takes the planes 0, 2, 1, 3 and in each the lines' u in bit-reversed order.
#define TILE_N 64
#define LIN_TILE_THREADS 256
// Floats a shared line: its 16·RM rows of x (or TILE_N features of w) and a pad of 8, so lines are
// 16-byte aligned for the vector reads and ≡ 8 (mod 32) floats apart, and a warp's stores (8 rows
// × 4 consecutive float4) hit 32 banks. A plane is 64 lines.
template <int RM>
__device__ __forceinline__ constexpr int tile_line() {
    return 16 * RM + 8;
}
#define TILE_WLINE 72
// Dynamic shared memory (the host's `ops_linear::tile_smem`): x's four planes, then w's: 147,456
// bytes for 64-row tiles (one block an SM), 114,688 for 32 (two).

// RM consecutive floats of a shared line (16-byte aligned for RM = 4, 8-byte for 2).
template <int RM>
__device__ __forceinline__ void tile_load(const float* p, float (&v)[RM]) {
    if constexpr (RM == 4) {
        const float4 a = *(const float4*)p;
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    } else {
        const float2 a = *(const float2*)p;
        v[0] = a.x, v[1] = a.y;
    }
}

// One chain (lane 4u + q of the chunk's lines), its RM × 4 piece of outputs, `jmax` steps (all
// eight in a whole chunk, FULL: no predicate, so the compiler may hoist each step's loads).
template <int RM, bool FULL>
__device__ __forceinline__ void tile_chain(const float* xs, const float* ws, int q, int u, int jmax, int ty, int tx,
                                           float (&c)[RM * 4]) {
    constexpr int XL = tile_line<RM>();
#pragma unroll
    for (int i = 0; i < RM * 4; i++) c[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < LIN_KC / 32; j++) {
        if (FULL || j < jmax) {
            const int line = q * 64 + j * 8 + u;
            float av[RM], bv[4];
            tile_load<RM>(xs + line * XL + ty * RM, av);
            tile_load<4>(ws + line * TILE_WLINE + tx * 4, bv);
#pragma unroll
            for (int r = 0; r < RM; r++)
#pragma unroll
                for (int f = 0; f < 4; f++) c[r * 4 + f] = fmaf(av[r], bv[f], c[r * 4 + f]);
        }
    }
    if (!FULL && jmax < LIN_KC / 32) {
#pragma unroll
        for (int i = 0; i < RM * 4; i++) c[i] = __fadd_rn(c[i], 0.0f);
    }
}

// The pairwise sum of plane q's eight chains in bit-reversed u order (leaf t takes u = bitrev3(t):
// 0, 4, 2, 6, 1, 5, 3, 7): a complete tree of three levels, one pending node a level. The loop is
// unrolled, so t and every index are constants and all stays in registers.
template <int RM, bool FULL>
__device__ __forceinline__ void tile_plane(const float* xs, const float* ws, int q, int jmax, int ty, int tx,
                                           float (&root)[RM * 4]) {
    constexpr int E = RM * 4;
    float n0[E], n1[E], c[E];
#pragma unroll
    for (int t = 0; t < 8; t++) {
        tile_chain<RM, FULL>(xs, ws, q, (t & 1) * 4 + (t & 2) + (t >> 2), jmax, ty, tx, c);
#pragma unroll
        for (int i = 0; i < E; i++) {
            if (t % 2 == 0) {
                n0[i] = c[i];  // a leaf waiting for its pair
                continue;
            }
            const float pair = __fadd_rn(n0[i], c[i]);  // leaves t - 1, t
            if (t % 4 == 1) n1[i] = pair;  // waiting for the next pair
            else if (t == 3) root[i] = __fadd_rn(n1[i], pair);  // leaves 0..3
            else root[i] = __fadd_rn(root[i], __fadd_rn(n1[i], pair));  // 4..7, then 0..7
        }
    }
}

// A chunk's float4 number a (elements 4a .. 4a + 3 of a row or feature, a = 8j + u) into the four
// planes of lines of LINE floats: element 32j + 4u + q at plane q, line j·8 + u = a, position `at`.
template <int LINE>
__device__ __forceinline__ void tile_put(float* planes, int a, int at, float4 v) {
    float* dst = planes + a * LINE + at;
    dst[0 * 64 * LINE] = v.x;
    dst[1 * 64 * LINE] = v.y;
    dst[2 * 64 * LINE] = v.z;
    dst[3 * 64 * LINE] = v.w;
}

// With `part` (a launch of one weight whose tiles alone would leave SMs idle: the host's choice),
// blockIdx.z is a chunk: the block computes that chunk's sums of its tile into part[chunk][row][
// feature], and the last block of the tile to arrive (`counters`, one per tile, zero between
// launches: that block resets it) folds the tile's chunks left in ascending order from there —
// the fold the unsplit block keeps in registers, so the same bits.
template <int TY, int RM>
__device__ __forceinline__ void linear_tile_body(const float* __restrict__ x, const u8* __restrict__ w, u64 row_bytes,
                                                 float* __restrict__ out, int num_rows, int n_out, int k_in, int bx,
                                                 int resid, float* __restrict__ part, u32* counters) {
    constexpr int TM = 16 * RM, E = RM * 4, XL = tile_line<RM>();
    extern __shared__ __align__(16) float tile_smem[];
    float* xs = tile_smem;
    float* ws = tile_smem + 4 * 64 * XL;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int r0 = blockIdx.y * TM, f0 = bx * TILE_N;
    const int num_chunks = (k_in + LIN_KC - 1) / LIN_KC;
    // Staging: a warp's step covers 8 rows (or features) × 4 consecutive float4 of the chunk, so
    // its global reads are 64-byte runs and its shared stores fall in 32 banks (tile_line). Float4
    // a of a row (elements 4a .. 4a + 3, a = 8j + u) goes to line j·8 + u = a of each plane.
    const int lane = tid % 32, warp = tid / 32;
    float acc[E];
    const int c_lo = part ? (int)blockIdx.z : 0, c_hi = part ? c_lo + 1 : num_chunks;
    for (int c = c_lo; c < c_hi; c++) {
        const int c0 = c * LIN_KC, clen = min(LIN_KC, k_in - c0);
        __syncthreads();  // every thread done with the last chunk's planes
        // Every load of a batch goes out before its first store.
        {
            float4 v[TM / 4];
#pragma unroll
            for (int i = 0; i < TM / 4; i++) {
                const int row = (i / 2) * 8 + lane / 4, a = (i % 2) * 32 + warp * 4 + lane % 4;
                v[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (r0 + row < num_rows && 4 * a < clen) v[i] = *(const float4*)(x + (u64)(r0 + row) * k_in + c0 + 4 * a);
            }
#pragma unroll
            for (int i = 0; i < TM / 4; i++)
                tile_put<XL>(xs, (i % 2) * 32 + warp * 4 + lane % 4, (i / 2) * 8 + lane / 4, v[i]);
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            // Feature f's weight, dequantized (`deq4`: K is a multiple of 4, so a float4 is all
            // inside K or all past it), in two batches of eight float4; features past the last
            // read a valid row and are never stored.
            float4 v[TILE_N / 8];
#pragma unroll
            for (int i = 0; i < TILE_N / 8; i++) {
                const int f = (h * 4 + i / 2) * 8 + lane / 4, kk = 4 * ((i % 2) * 32 + warp * 4 + lane % 4);
                const u8* wrow = w + (u64)min(f0 + f, n_out - 1) * row_bytes;
                v[i] = kk < clen ? deq4<TY>(wrow, c0 + kk) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int i = 0; i < TILE_N / 8; i++)
                tile_put<TILE_WLINE>(ws, (i % 2) * 32 + warp * 4 + lane % 4, (h * 4 + i / 2) * 8 + lane / 4, v[i]);
        }
        __syncthreads();
        const int jmax = (clen + 31) / 32;
        // The planes in bit-reversed lane order — 0, 2, 1, 3: leaves 0..7, 8..15, 16..23, 24..31 —
        // as a loop (one plane's code, not four), the pending nodes in registers.
        float p01[E], p2[E];
#pragma unroll 1
        for (int s = 0; s < 4; s++) {
            float root[E];
            if (jmax == LIN_KC / 32) tile_plane<RM, true>(xs, ws, (s & 1) * 2 + s / 2, jmax, ty, tx, root);
            else tile_plane<RM, false>(xs, ws, (s & 1) * 2 + s / 2, jmax, ty, tx, root);
#pragma unroll
            for (int i = 0; i < E; i++) {
                if (s == 0) p01[i] = root[i];
                else if (s == 1) p01[i] = __fadd_rn(p01[i], root[i]);
                else if (s == 2) p2[i] = root[i];
                else {
                    const float sum = __fadd_rn(p01[i], __fadd_rn(p2[i], root[i]));
                    acc[i] = c == c_lo ? sum : __fadd_rn(acc[i], sum);
                }
            }
        }
    }
    // f(row, feature, i) for each of the thread's RM × 4 outputs inside the launch.
    auto each_output = [&](auto&& f) {
#pragma unroll
        for (int r = 0; r < RM; r++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int row = r0 + ty * RM + r, m = f0 + tx * 4 + q;
                if (row < num_rows && m < n_out) f(row, m, r * 4 + q);
            }
    };
    if (part) {
        __shared__ u32 last;
        const u64 stride = (u64)num_rows * n_out;  // a chunk's sums
        each_output([&](int row, int m, int i) { part[c_lo * stride + (u64)row * n_out + m] = acc[i]; });
        __syncthreads();
        u32* count = counters + blockIdx.y * gridDim.x + blockIdx.x;
        if (tid == 0) last = fold_arrive(count) == gridDim.z - 1;
        __syncthreads();
        if (!last) return;
        each_output([&](int row, int m, int i) {
            const float* p = part + (u64)row * n_out + m;
            float a = __ldcg(p);
            for (int c = 1; c < num_chunks; c++) a = __fadd_rn(a, __ldcg(p + c * stride));
            acc[i] = a;
        });
        if (tid == 0) *count = 0;
    }
    each_output([&](int row, int m, int i) { store_out(out + (u64)row * n_out + m, acc[i], resid); });
}

// The kernels take linear_'s leading arguments (the host fills them alike), then `part` and
// `counters` (null: not split by chunk); up to three weights. linear_tile_ has tiles of 64 rows,
// linear_tile32_ of 32.
#define LINEAR_TILE_KERNELS(NAME, TY)                                                                        \
    extern "C" __global__ void __launch_bounds__(LIN_TILE_THREADS, 1) linear_tile_##NAME(                   \
        const float* x, const u8* w, const u8* w1, const u8* w2, u64 row_bytes, float* out, float* out1,      \
        float* out2, int num_rows, int n_out, int n1, int n2, int k_in, int resid, float* part,                \
        u32* counters) { TL_BLOCK();                                                                                      \
        PDL_ENTRY();                                                                                          \
        LINEAR_SEGS(TILE_N)                                                                                   \
        linear_tile_body<TY, 4>(x, ws, row_bytes, os, num_rows, ns, k_in, sg.u, resid, part, counters);       \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(LIN_TILE_THREADS, 2) linear_tile32_##NAME(                 \
        const float* x, const u8* w, const u8* w1, const u8* w2, u64 row_bytes, float* out, float* out1,      \
        float* out2, int num_rows, int n_out, int n1, int n2, int k_in, int resid, float* part,                \
        u32* counters) { TL_BLOCK();                                                                                      \
        PDL_ENTRY();                                                                                          \
        LINEAR_SEGS(TILE_N)                                                                                   \
        linear_tile_body<TY, 2>(x, ws, row_bytes, os, num_rows, ns, k_in, sg.u, resid, part, counters);       \
    }

FOR_EACH_TYPE(LINEAR_TILE_KERNELS)
