// The CUDA device environment of plumb's kernels, on the CPU: what `translate.py` puts ahead of
// the kernel sources so that g++ compiles them into a module the fake driver (`driver.cpp`) runs.
//
// A block's threads are fibers on one OS thread. A fiber runs until it reaches a barrier
// (`__syncthreads`, a warp's `__syncwarp` or shuffle) or returns; a barrier opens once every
// thread it waits for (every live thread of the block, or of the warp's mask) has reached it.
// Blocks run one after another (-fno-gnu-unique keeps each loaded copy of a module its own statics,
// so backends on two threads run side by side). So shared memory is ordinary memory, atomics need no atomicity,
// and a kernel that forgets a barrier reads what the threads before it left (or the 0xff bytes a
// block's dynamic shared memory starts with), as a GPU may. Arithmetic is the CPU's IEEE float:
// `__fmul_rn` and friends round as the GPU's do, `fmaf` is a true fused multiply-add, and the
// module is compiled with -ffp-contract=off like NVRTC's --fmad=false; approximate intrinsics
// (`__expf`, `rsqrtf`) are the exact functions. Inline PTX is rewritten by translate.py into the
// `emu::` calls below where it has a model here; any other instruction ends the launch with an
// error naming it. The emulator checks a kernel's logic (indices, barriers, the data its threads
// exchange), never its speed or the GPU's own bits.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <type_traits>
#include <utility>

#if !defined(__x86_64__)
#error "cuda-emu switches fibers with x86-64 code"
#endif

#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define EMU_GLOBAL
#define __launch_bounds__(...)
#define __grid_constant__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict

struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct uint3 { unsigned x, y, z; };
struct alignas(16) double2 { double x, y; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

namespace emu {

enum State { RUN, AT_BLOCK, AT_WARP, AT_NAMED, DONE };

struct Thread {
    void* sp;
    State state;
    uint3 tid;
    unsigned lin;       // linear index in the block
    unsigned mask;      // the warp mask it waits with (AT_WARP)
    unsigned bar_id;    // the named barrier it waits at and the threads that barrier counts (AT_NAMED)
    unsigned bar_count;
    unsigned exchanges; // shuffles and votes done: picks the warp's exchange buffer
};

struct Warp {
    unsigned long long slot[2][32];
};

// One launch's state (launches are serialized by the driver).
struct Global {
    uint3 block_idx, block_dim, grid_dim;
    Thread* threads;
    Warp* warps;
    unsigned num_threads;
    Thread* cur;
    void* sched_sp;
    void (*call)(void* fn, void** params);
    void* fn;
    void** params;
    const char* error;
    bool reverse;  // a block's threads run last to first
    unsigned long long grid_id;  // %gridid: the driver's number for this launch (a graph node keeps its own)
};
inline Global g;

// %globaltimer: the host's monotonic clock in nanoseconds.
inline unsigned long long globaltimer() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

// The dynamic shared memory of a block (`extern __shared__`), in this module's static storage so
// that the 32-bit shared addresses of cp.async and ldmatrix reach it and the static `__shared__`
// variables alike (both lie within 2 GiB of `dyn_smem`).
alignas(1024) inline unsigned char dyn_smem[232448];

}  // namespace emu

#define threadIdx (emu::g.cur->tid)
#define blockIdx (emu::g.block_idx)
#define blockDim (emu::g.block_dim)
#define gridDim (emu::g.grid_dim)
#define warpSize 32

extern "C" void emu_switch_ctx(void** save, void* to) __attribute__((visibility("hidden")));
__asm__(
    ".text\n"
    ".globl emu_switch_ctx\n"
    ".hidden emu_switch_ctx\n"
    ".type emu_switch_ctx,@function\n"
    "emu_switch_ctx:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_switch_ctx, .-emu_switch_ctx\n");

namespace emu {

// From the current fiber to the next runnable one in the block's order (or, when none is left
// this round or the launch failed, back to the scheduler, which opens the barriers).
inline void yield() {
    Thread* me = g.cur;
    if (!g.error) {
        const int step = g.reverse ? -1 : 1;
        for (int i = (int)me->lin + step; i >= 0 && i < (int)g.num_threads; i += step) {
            Thread* t = &g.threads[i];
            if (t->state == RUN) {
                g.cur = t;
                emu_switch_ctx(&me->sp, t->sp);
                return;
            }
        }
    }
    emu_switch_ctx(&me->sp, g.sched_sp);
}

[[noreturn]] inline void fail(const char* what) {
    if (!g.error) g.error = what;
    g.cur->state = DONE;
    yield();
    __builtin_unreachable();
}

inline void block_barrier() {
    g.cur->state = AT_BLOCK;
    yield();
}

// `bar.sync id, count` (id 1..15): waits until `count` threads (whole warps) wait at barrier
// `id`; id 0 with the block's thread count is `__syncthreads`.
inline void named_barrier(unsigned id, unsigned count) {
    if (id > 15) fail("bar.sync: a barrier id past 15");
    if (count == 0 || count % 32 != 0 || count > g.num_threads) fail("bar.sync: a thread count that is not whole warps of the block");
    if (id == 0 && count == g.num_threads) return block_barrier();
    if (id == 0) fail("bar.sync: barrier 0 with fewer threads than the block's (__syncthreads' own)");
    g.cur->bar_id = id;
    g.cur->bar_count = count;
    g.cur->state = AT_NAMED;
    yield();
}

inline void warp_barrier(unsigned mask) {
    g.cur->mask = mask;
    g.cur->state = AT_WARP;
    yield();
}

template <class T>
inline unsigned long long to_bits(T v) {
    static_assert(sizeof(T) <= 8, "shuffles move up to 8 bytes");
    unsigned long long b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
inline T from_bits(unsigned long long b) {
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}

// Every lane of the mask puts `v` in its slot, waits for the others, and reads the slot of `src(lane)`.
template <class T, class F>
inline T exchange(unsigned mask, T v, F src) {
    Thread* t = g.cur;
    const unsigned lane = t->lin & 31, b = t->exchanges++ & 1;
    Warp& w = g.warps[t->lin >> 5];
    w.slot[b][lane] = to_bits(v);
    warp_barrier(mask);
    return from_bits<T>(w.slot[b][src(lane)]);
}

// Every lane of the mask contributes `pred`; the ballot of the mask's lanes.
inline unsigned ballot(unsigned mask, int pred) {
    Thread* t = g.cur;
    const unsigned lane = t->lin & 31, b = t->exchanges++ & 1;
    Warp& w = g.warps[t->lin >> 5];
    w.slot[b][lane] = pred != 0;
    warp_barrier(mask);
    unsigned bits = 0;
    for (unsigned l = 0; l < 32; l++)
        if ((mask >> l & 1) && w.slot[b][l]) bits |= 1u << l;
    return bits;
}

inline unsigned smem_u32(const void* p) { return (unsigned)((const unsigned char*)p - dyn_smem); }
inline unsigned char* smem_ptr(unsigned a) { return dyn_smem + (int)a; }

inline void cp_async(unsigned dst, const void* src, int size, int src_bytes) {
    unsigned char* d = smem_ptr(dst);
    if (src_bytes > size) src_bytes = size;
    if (src_bytes > 0) memcpy(d, src, src_bytes);
    if (src_bytes < size) memset(d + src_bytes, 0, size - src_bytes);
}

inline float cvt_f32_f16(unsigned short h) {
    const unsigned sign = (unsigned)(h & 0x8000u) << 16, e = h >> 10 & 31, m = h & 1023;
    unsigned u;
    if (e == 31) {
        u = sign | 0x7f800000u | m << 13;
    } else if (e) {
        u = sign | (e + 112) << 23 | m << 13;
    } else {
        float f = (float)m * 5.9604644775390625e-8f;  // m * 2^-24, exact
        return sign ? -f : f;
    }
    return from_bits<float>(u);
}

// f32 -> f16, round to nearest even; NaN stays a NaN, overflow goes to infinity.
inline unsigned short cvt_rn_f16_f32(float f) {
    const unsigned u = (unsigned)to_bits(f), sign = u >> 16 & 0x8000u;
    const unsigned a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // rounds past 65504
    if (a < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
        const float scaled = from_bits<float>(a) * 16777216.0f;  // exact: * 2^24
        const float r = nearbyintf(scaled);                        // ties to even (default mode)
        return (unsigned short)(sign | (unsigned)r);
    }
    unsigned mant = a + 0xfffu + (a >> 13 & 1);
    return (unsigned short)(sign | ((mant >> 13) - (112u << 10)));
}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: the warp's A (16x16), B (16x8) and C
// fragments gathered, each lane's four outputs computed from the exact products summed in double
// and rounded once (a tensor core's own accumulation rounds otherwise: same inputs, same result
// here, which is what the bit tests compare; not the GPU's bits).
struct MmaSlots {
    unsigned a[32][4], b[32][2];
};
inline MmaSlots mma_slots[32][2];

template <bool BF16>
inline float wide16(unsigned h) {
    return BF16 ? from_bits<float>(h << 16) : cvt_f32_f16((unsigned short)h);
}

template <bool BF16>
inline void mma_m16n8k16(float& d0, float& d1, float& d2, float& d3, unsigned a0, unsigned a1, unsigned a2,
                         unsigned a3, unsigned b0, unsigned b1, float c0, float c1, float c2, float c3) {
    Thread* t = g.cur;
    const unsigned lane = t->lin & 31, buf = t->exchanges++ & 1;
    MmaSlots& s = mma_slots[t->lin >> 5][buf];
    s.a[lane][0] = a0, s.a[lane][1] = a1, s.a[lane][2] = a2, s.a[lane][3] = a3;
    s.b[lane][0] = b0, s.b[lane][1] = b1;
    warp_barrier(0xffffffffu);
    // A (row r, col k): lane (r % 8) * 4 + (k % 8) / 2, register (r >= 8) + 2 (k >= 8), half k & 1.
    auto A = [&](int r, int k) {
        const unsigned w = s.a[(r & 7) * 4 + ((k & 7) >> 1)][(r >> 3) + 2 * (k >> 3)];
        return wide16<BF16>(k & 1 ? w >> 16 : w & 0xffffu);
    };
    // B (row k, col n): lane n * 4 + (k % 8) / 2, register k >= 8, half k & 1.
    auto B = [&](int k, int n) {
        const unsigned w = s.b[n * 4 + ((k & 7) >> 1)][k >> 3];
        return wide16<BF16>(k & 1 ? w >> 16 : w & 0xffffu);
    };
    const float c[4] = {c0, c1, c2, c3};
    float* d[4] = {&d0, &d1, &d2, &d3};
    const int group = lane >> 2, tig = lane & 3;
    for (int i = 0; i < 4; i++) {
        const int row = group + 8 * (i >> 1), col = tig * 2 + (i & 1);
        double acc = c[i];
        for (int k = 0; k < 16; k++) acc += (double)A(row, k) * (double)B(k, col);
        *d[i] = (float)acc;
    }
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lanes 8j..8j+7 address the rows of matrix j;
// lane l gets, of each matrix, row l / 4's elements 2 (l % 4) and 2 (l % 4) + 1 (transposed:
// column l / 4's).
inline void ldmatrix_x4(bool trans, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, unsigned addr) {
    Thread* t = g.cur;
    const unsigned lane = t->lin & 31, b = t->exchanges++ & 1;
    Warp& w = g.warps[t->lin >> 5];
    w.slot[b][lane] = addr;
    warp_barrier(0xffffffffu);
    unsigned* r[4] = {&r0, &r1, &r2, &r3};
    for (int j = 0; j < 4; j++) {
        if (!trans) {
            memcpy(r[j], smem_ptr((unsigned)w.slot[b][j * 8 + lane / 4]) + (lane % 4) * 4, 4);
        } else {
            unsigned short e0, e1;
            memcpy(&e0, smem_ptr((unsigned)w.slot[b][j * 8 + (lane % 4) * 2]) + (lane / 4) * 2, 2);
            memcpy(&e1, smem_ptr((unsigned)w.slot[b][j * 8 + (lane % 4) * 2 + 1]) + (lane / 4) * 2, 2);
            *r[j] = e0 | (unsigned)e1 << 16;
        }
    }
}

}  // namespace emu

// Barriers, shuffles and votes.
inline void __syncthreads() { emu::block_barrier(); }
inline int __syncthreads_count(int pred) {
    static int count;
    emu::block_barrier();
    if (emu::g.cur->lin == 0) count = 0;
    emu::block_barrier();
    count += pred != 0;
    emu::block_barrier();
    const int c = count;
    emu::block_barrier();
    return c;
}
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_barrier(mask); }
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return emu::exchange(mask, v, [&](unsigned lane) {
        const unsigned s = lane ^ (unsigned)lane_mask;
        return s / width == lane / width ? s : lane;
    });
}
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return emu::exchange(mask, v, [&](unsigned lane) { return lane / width * width + ((unsigned)src % width); });
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return emu::exchange(mask, v, [&](unsigned lane) {
        const unsigned s = lane + delta;
        return s / width == lane / width ? s : lane;
    });
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return emu::exchange(mask, v, [&](unsigned lane) {
        return lane % width >= delta ? lane - delta : lane;
    });
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return emu::ballot(mask, pred); }
inline int __any_sync(unsigned mask, int pred) { return emu::ballot(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return emu::ballot(mask, pred) == (mask & emu::ballot(mask, 1)); }
inline unsigned __activemask() { return 0xffffffffu; }

// Memory: one thread runs at a time, so fences are empty and atomics plain.
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __nanosleep(unsigned) {}
template <class T> inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <class T> inline T atomicSub(T* p, T v) { T old = *p; *p = old - v; return old; }
template <class T> inline T atomicMax(T* p, T v) { T old = *p; *p = old < v ? v : old; return old; }
template <class T> inline T atomicMin(T* p, T v) { T old = *p; *p = v < old ? v : old; return old; }
template <class T> inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <class T> inline T atomicCAS(T* p, T cmp, T v) { T old = *p; if (old == cmp) *p = v; return old; }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }
inline unsigned long long __cvta_generic_to_shared(const void* p) { return emu::smem_u32(p); }
inline long long clock64() { return 0; }

// Arithmetic, rounded as the GPU's correctly rounded intrinsics are.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float __expf(float a) { return expf(a); }
inline float __logf(float a) { return logf(a); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
inline float __saturatef(float a) { return a < 0.0f ? 0.0f : (a > 1.0f ? 1.0f : a); }
inline float __uint_as_float(unsigned u) { return emu::from_bits<float>(u); }
inline unsigned __float_as_uint(float f) { return (unsigned)emu::to_bits(f); }
inline float __int_as_float(int i) { return emu::from_bits<float>((unsigned)i); }
inline int __float_as_int(float f) { return (int)(unsigned)emu::to_bits(f); }
inline double __longlong_as_double(long long i) { return emu::from_bits<double>((unsigned long long)i); }
inline long long __double_as_longlong(double d) { return (long long)emu::to_bits(d); }
inline float __uint2float_rn(unsigned u) { return (float)u; }
inline float __int2float_rn(int i) { return (float)i; }
inline float __ll2float_rn(long long i) { return (float)i; }
inline int __float2int_rn(float f) { return (int)nearbyintf(f); }
inline int __float2int_rz(float f) { return (int)f; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= (x >> i & 1u) << (31 - i);
    return r;
}
template <class A, class B>
inline typename std::common_type<A, B>::type min(A a, B b) {
    typedef typename std::common_type<A, B>::type C;
    if constexpr (std::is_floating_point<C>::value) return fmin((C)a, (C)b);
    else return (C)b < (C)a ? (C)b : (C)a;
}
template <class A, class B>
inline typename std::common_type<A, B>::type max(A a, B b) {
    typedef typename std::common_type<A, B>::type C;
    if constexpr (std::is_floating_point<C>::value) return fmax((C)a, (C)b);
    else return (C)a < (C)b ? (C)b : (C)a;
}
