// Exact dequantization of one element of a GGML row, one rule per format, used by every kernel
// (`embed` and `linear` alike). Each rule is plumb_core::quant's, operation for operation: the
// same f16 widening, the same f32 multiplies and adds, each rounded on its own (the module is
// compiled with --fmad=false, and the roundings are spelled out with __fmul_rn / __fadd_rn).
// Type template arguments are GGML type ids.

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

// Programmatic dependent launch (sm_90). Launched with it (`launch.rs`), a kernel's blocks may be
// scheduled while the kernel before it finishes; PDL_ENTRY, the first statement of every kernel,
// waits until that kernel has completed and its writes are visible, then lets the next kernel be
// scheduled. Nothing is read or written before the wait, so the order of memory effects is
// exactly the serial one: only launch latency overlaps — except in the `linear` kernels, which
// split it (PDL_LAUNCH first, PDL_WAIT later, every thread once) to read their first weight bytes
// before waiting: no kernel of a forward writes a weight, so those reads see the same bytes either
// way, and everything else still follows the wait. (No-ops where the kernel was launched without
// the attribute, and compiled away before sm_90.)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PDL_WAIT()                                              \
    do {                                                        \
        asm volatile("griddepcontrol.wait;\n" ::: "memory");   \
        TL_WAITED();                                            \
    } while (0)
#define PDL_LAUNCH() asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory")
#else
#define PDL_WAIT() \
    do {           \
    } while (0)
#define PDL_LAUNCH() \
    do {             \
    } while (0)
#endif
// PLUMB_LATE_WEIGHTS (compiled in by PLUMB_CUDA_EARLY_WEIGHTS=0, for measuring): weights too are
// read only after the wait.
#ifdef PLUMB_LATE_WEIGHTS
#define EARLY_WEIGHTS 0
#else
#define EARLY_WEIGHTS 1
#endif
// A block's arrival at a split's counter, for the last arrival's fold (`linear_tma`, `linear_tile`,
// `linear_mma`, the split decode attention), around two block barriers:
//   barrier; thread 0: ticket = fold_arrive(count); barrier; the last arrival reads the others' partials.
// Thread 0's atomic alone is acq_rel at GPU scope, as CUTLASS's GPU barrier arrives: its release is
// cumulative, publishing the whole block's stores that the first barrier ordered before it, and its
// acquire, at the last arrival, orders every other block's stores before the reads that follow the
// second barrier. (Until session 33 every thread fenced before and after the arrival, __threadfence:
// a MEMBAR.SC.GPU by all warps on the critical path of every split fold; this is 1% faster in
// the 8B's decode on an H100, receipts/ab/session33.)
__device__ __forceinline__ u32 fold_arrive(u32* count) {
    u32 old;
    asm volatile("atom.acq_rel.gpu.add.u32 %0, [%1], 1;\n" : "=r"(old) : "l"(count) : "memory");
    return old;
}

#define PDL_ENTRY()   \
    do {              \
        PDL_WAIT();   \
        PDL_LAUNCH(); \
    } while (0)

// PLUMB_TIMELINE (compiled in by PLUMB_CUDA_TIMELINE, `timeline.rs`): TL_BLOCK, the first statement
// of every kernel, stamps each block with the global nanosecond timer as its thread 0 starts and
// ends, and while the host has `plumb_tl_on` set (to the recorded step's number, from 1) appends
// (that number above the launch's %gridid, a hash of the kernel's name and the block's index,
// start, end, and when thread 0's PDL wait returned) to `plumb_tl`. A graph's replays keep their
// nodes' %gridid, so the step tells them apart: the kernels' times inside CUDA graphs, PDL's
// overlap included, which events (profile.rs) cannot see. Only thread 0 of a block writes; no
// kernel's arithmetic changes. Compiled away otherwise.
#ifdef PLUMB_TIMELINE
#define TL_CAP (1u << 20)
__device__ u64 plumb_tl[5 * (u64)TL_CAP];
__device__ u32 plumb_tl_n;
__device__ u32 plumb_tl_on;
__device__ __forceinline__ u64 tl_clock() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// When thread 0's PDL wait returned (0 before), for its block's record: the time a launch sat
// resident waiting on the kernel before it, apart from its own work.
__device__ __forceinline__ u64& tl_wait_slot() {
    __shared__ u64 waited;
    return waited;
}
#define TL_WAITED()                                                                     \
    do {                                                                                \
        if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) tl_wait_slot() = tl_clock(); \
    } while (0)
struct TlBlock {
    u64 t0;
    const char* name;
    __device__ explicit TlBlock(const char* n) : t0(tl_clock()), name(n) {
        if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) tl_wait_slot() = 0;
    }
    __device__ ~TlBlock() {
        if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0) return;
        const u32 step = *(volatile u32*)&plumb_tl_on;
        if (step == 0) return;
        const u64 t1 = tl_clock();
        u64 grid;
        asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
        u32 h = 2166136261u;  // FNV-1a of the name, as timeline.rs hashes the kernels' names
        for (const char* c = name; *c; c++) h = (h ^ (u32)(u8)*c) * 16777619u;
        const u32 i = atomicAdd(&plumb_tl_n, 1u);
        if (i < TL_CAP) {
            u64* r = plumb_tl + 5 * (u64)i;
            r[0] = (u64)step << 48 | (grid & 0xffffffffffffull);
            r[1] = (u64)h << 32 | (u64)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
            r[2] = t0;
            r[3] = t1;
            r[4] = tl_wait_slot();
        }
    }
};
#define TL_BLOCK() TlBlock tl_block_(__func__)
#else
#define TL_BLOCK() \
    do {           \
    } while (0)
#define TL_WAITED() \
    do {            \
    } while (0)
#endif

#define TY_F32 0
#define TY_F16 1
#define TY_Q4_0 2
#define TY_Q4_1 3
#define TY_Q5_0 6
#define TY_Q5_1 7
#define TY_Q8_0 8
#define TY_Q2_K 10
#define TY_Q3_K 11
#define TY_Q4_K 12
#define TY_Q5_K 13
#define TY_Q6_K 14
#define TY_BF16 30

// Exact f16 -> f32 widening in integer code (no header needed).
__device__ __forceinline__ float f16_to_f32(u32 h) {
    u32 sign = (h & 0x8000u) << 16;
    u32 exp = (h >> 10) & 0x1Fu;
    u32 man = h & 0x3FFu;
    if (exp == 0) {
        // Subnormal or zero: man * 2^-24, exact in f32.
        float v = __fmul_rn((float)man, 1.0f / 16777216.0f);
        return __uint_as_float(sign | __float_as_uint(v));
    }
    if (exp == 0x1F) return __uint_as_float(sign | 0x7F800000u | (man << 13));
    return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// The little-endian f16 at byte `at` (byte loads: block fields are not always aligned).
__device__ __forceinline__ float f16_at(const u8* b, int at) {
    return f16_to_f32((u32)b[at] | ((u32)b[at + 1] << 8));
}

// The 4-bit (or 5-bit low part) quant of element j of a 32-element legacy block whose nibbles start at qs.
__device__ __forceinline__ u32 nibble(const u8* qs, int j) {
    return j < 16 ? (qs[j] & 0x0Fu) : (qs[j - 16] >> 4);
}

// Scale and min of sub-block `sub` of a Q4_K / Q5_K super-block (12 packed bytes of 6-bit values).
__device__ __forceinline__ void k_scale_min(const u8* s, int sub, u32* sc, u32* mn) {
    if (sub < 4) {
        *sc = s[sub] & 0x3Fu;
        *mn = s[4 + sub] & 0x3Fu;
    } else {
        int i = sub - 4;
        *sc = (s[8 + i] & 0x0Fu) | ((s[i] >> 2) & 0x30u);
        *mn = (s[8 + i] >> 4) | ((s[4 + i] >> 2) & 0x30u);
    }
}

// Element k of the row starting at `row`, in type TY.
template <int TY>
__device__ __forceinline__ float deq(const u8* row, int k) {
    if (TY == TY_F32) {
        return ((const float*)row)[k];
    } else if (TY == TY_F16) {
        return f16_to_f32(((const unsigned short*)row)[k]);
    } else if (TY == TY_BF16) {
        return __uint_as_float((u32)((const unsigned short*)row)[k] << 16);
    } else if (TY == TY_Q4_0) {
        const u8* b = row + (k / 32) * 18;
        int q = (int)nibble(b + 2, k % 32) - 8;
        return __fmul_rn(f16_at(b, 0), (float)q);
    } else if (TY == TY_Q4_1) {
        const u8* b = row + (k / 32) * 20;
        u32 q = nibble(b + 4, k % 32);
        return __fadd_rn(__fmul_rn(f16_at(b, 0), (float)q), f16_at(b, 2));
    } else if (TY == TY_Q5_0 || TY == TY_Q5_1) {
        const int bytes = TY == TY_Q5_0 ? 22 : 24;
        const int qh_at = TY == TY_Q5_0 ? 2 : 4;
        const u8* b = row + (k / 32) * bytes;
        int j = k % 32;
        u32 qh = (u32)b[qh_at] | ((u32)b[qh_at + 1] << 8) | ((u32)b[qh_at + 2] << 16) | ((u32)b[qh_at + 3] << 24);
        u32 q = nibble(b + qh_at + 4, j) | (((qh >> j) & 1u) << 4);
        if (TY == TY_Q5_0) return __fmul_rn(f16_at(b, 0), (float)((int)q - 16));
        return __fadd_rn(__fmul_rn(f16_at(b, 0), (float)q), f16_at(b, 2));
    } else if (TY == TY_Q8_0) {
        const u8* b = row + (k / 32) * 34;
        return __fmul_rn((float)(signed char)b[2 + k % 32], f16_at(b, 0));
    } else if (TY == TY_Q2_K) {
        const u8* b = row + (k / 256) * 84;
        int idx = k % 256;
        int half = idx / 128, shift = (idx / 32) % 4, l = idx % 32;
        u32 q = (b[16 + half * 32 + l] >> (2 * shift)) & 3u;
        u32 sc = b[idx / 16];
        float dl = __fmul_rn(f16_at(b, 80), (float)(sc & 0x0Fu));
        float ml = __fmul_rn(f16_at(b, 82), (float)(sc >> 4));
        return __fsub_rn(__fmul_rn(dl, (float)q), ml);
    } else if (TY == TY_Q3_K) {
        const u8* b = row + (k / 256) * 110;
        const u8* packed = b + 96;
        int idx = k % 256;
        int i = idx / 16;
        u32 low = (packed[i % 8] >> (4 * (i / 8))) & 0x0Fu;
        u32 high = (packed[8 + i % 4] >> (2 * (i / 4))) & 0x03u;
        float s = (float)((int)(signed char)(u8)(low | (high << 4)) - 32);
        int half = idx / 128, shift = (idx / 32) % 4, l = idx % 32;
        int lq = (b[32 + half * 32 + l] >> (2 * shift)) & 3;
        // A set hmask bit means "no offset"; a clear one subtracts 4.
        int hb = ((b[l] >> (idx / 32)) & 1) ^ 1;
        int q = lq - (hb << 2);
        return __fmul_rn(__fmul_rn(f16_at(b, 108), s), (float)q);
    } else if (TY == TY_Q4_K || TY == TY_Q5_K) {
        const int bytes = TY == TY_Q4_K ? 144 : 176;
        const u8* b = row + (k / 256) * bytes;
        int idx = k % 256;
        int sub = idx / 32, l = idx % 32;
        u32 sc, mn;
        k_scale_min(b + 4, sub, &sc, &mn);
        u32 q;
        if (TY == TY_Q4_K) {
            q = (b[16 + (sub / 2) * 32 + l] >> (4 * (sub % 2))) & 0x0Fu;
        } else {
            u32 low = (b[48 + (sub / 2) * 32 + l] >> (4 * (sub % 2))) & 0x0Fu;
            u32 high = (b[16 + l] >> sub) & 1u;
            q = low | (high << 4);
        }
        float dl = __fmul_rn(f16_at(b, 0), (float)sc);
        float ml = __fmul_rn(f16_at(b, 2), (float)mn);
        return __fsub_rn(__fmul_rn(dl, (float)q), ml);
    } else if (TY == TY_Q6_K) {
        const u8* b = row + (k / 256) * 210;
        int idx = k % 256;
        int half = idx / 128, quarter = (idx / 32) % 4, l = idx % 32;
        u32 low = (b[half * 64 + (quarter % 2) * 32 + l] >> (4 * (quarter / 2))) & 0x0Fu;
        u32 high = (b[128 + half * 32 + l] >> (2 * quarter)) & 3u;
        int q = (int)(low | (high << 4)) - 32;
        float sc = (float)(signed char)b[192 + idx / 16];
        return __fmul_rn(__fmul_rn(f16_at(b, 208), sc), (float)q);
    }
    return 0.0f;
}

// Elements k .. k + 3 of the row at `row` (k a multiple of 4, so one block holds all four), each
// by deq's rule for its format, operation for operation (so the bits of four deq calls), with
// the block's shared fields read and widened once and the four quants read as one word: byte
// loads and a widening an element had been most of the prefill tile's staging work
// (linear_tile.cu). Reads need the row 16-byte aligned (every weight is its own allocation; the
// host checks) — words of Q4_1's 4-byte aligned blocks, half-words of Q4_0's and Q8_0's 18- and
// 34-byte ones; other formats take deq four times.
template <int TY>
__device__ __forceinline__ float4 deq4(const u8* row, int k) {
    float e[4];
    if (TY == TY_F32) {
        return *(const float4*)(row + 4 * (u64)k);
    } else if (TY == TY_Q4_1) {
        const u8* b = row + (k / 32) * 20;
        const u32 dm = *(const u32*)b;
        const float d = f16_to_f32(dm & 0xFFFFu), m = f16_to_f32(dm >> 16);
        const int j = k % 32;
        const u32 qs = *(const u32*)(b + 4 + (j & 15)) >> (j < 16 ? 0 : 4);
#pragma unroll
        for (int i = 0; i < 4; i++) e[i] = __fadd_rn(__fmul_rn(d, (float)((qs >> (8 * i)) & 0x0Fu)), m);
    } else if (TY == TY_Q4_0) {
        const u8* b = row + (k / 32) * 18;
        const float d = f16_to_f32(*(const unsigned short*)b);
        const int j = k % 32;
        const unsigned short* h = (const unsigned short*)(b + 2 + (j & 15));
        const u32 qs = ((u32)h[0] | ((u32)h[1] << 16)) >> (j < 16 ? 0 : 4);
#pragma unroll
        for (int i = 0; i < 4; i++) e[i] = __fmul_rn(d, (float)((int)((qs >> (8 * i)) & 0x0Fu) - 8));
    } else if (TY == TY_Q8_0) {
        const u8* b = row + (k / 32) * 34;
        const float d = f16_to_f32(*(const unsigned short*)b);
        const unsigned short* h = (const unsigned short*)(b + 2 + k % 32);
        const u32 qs = (u32)h[0] | ((u32)h[1] << 16);
#pragma unroll
        for (int i = 0; i < 4; i++) e[i] = __fmul_rn((float)(signed char)(u8)(qs >> (8 * i)), d);
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) e[i] = deq<TY>(row, k + i);
    }
    return make_float4(e[0], e[1], e[2], e[3]);
}

// Instantiates MACRO(name, type id) for every format the backend supports.
#define FOR_EACH_TYPE(MACRO) \
    MACRO(f32, TY_F32)       \
    MACRO(f16, TY_F16)       \
    MACRO(bf16, TY_BF16)     \
    MACRO(q4_0, TY_Q4_0)     \
    MACRO(q4_1, TY_Q4_1)     \
    MACRO(q5_0, TY_Q5_0)     \
    MACRO(q5_1, TY_Q5_1)     \
    MACRO(q8_0, TY_Q8_0)     \
    MACRO(q2_k, TY_Q2_K)     \
    MACRO(q3_k, TY_Q3_K)     \
    MACRO(q4_k, TY_Q4_K)     \
    MACRO(q5_k, TY_Q5_K)     \
    MACRO(q6_k, TY_Q6_K)
