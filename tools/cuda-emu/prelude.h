// The CUDA device environment of plumb's kernels, on the CPU: what `translate.py` puts ahead of
// the kernel sources so that g++ compiles them into a module the fake driver (`driver.cpp`) runs.
//
// A block's threads are fibers on one OS thread. A fiber runs until it reaches a barrier
// (`__syncthreads`, a warp's `__syncwarp` or shuffle) or returns; a barrier opens once every
// thread it waits for (every live thread of the block, or of the warp's mask) has reached it.
// Blocks run one after another, or a cluster's blocks together, each thread holding its block's
// shared memory while it runs (`activate`) (-fno-gnu-unique keeps each loaded copy of a module its own statics,
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
#include "tensor_map.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <initializer_list>
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

// The fibers a launch may hold: a cluster's threads (up to 1,024 a block).
constexpr unsigned MAX_FIBERS = 4096;

enum State { RUN, AT_BLOCK, AT_WARP, AT_NAMED, AT_MBAR, AT_CLUSTER, DONE };

struct Thread {
    void* sp;
    State state;
    uint3 tid;
    uint3 block;        // its block's index (blockIdx)
    unsigned lin;       // index among the launch's fibers: a cluster's blocks one after another
    unsigned in_cta;    // linear index in its block
    unsigned cta;       // its block's rank in the cluster
    unsigned mask;      // the warp mask it waits with (AT_WARP)
    unsigned bar_id;    // the named barrier it waits at and the threads that barrier counts (AT_NAMED),
    unsigned bar_count; // or the mbarrier's shared address and the phase parity it waits for (AT_MBAR)
    unsigned exchanges; // shuffles and votes done: picks the warp's exchange buffer
};

struct Warp {
    unsigned long long slot[2][32];
};

// One launch's state (launches are serialized by the driver).
struct Global {
    uint3 block_dim, grid_dim;
    Thread* threads;
    Warp* warps;
    unsigned num_threads;    // the fibers: every thread of a cluster
    unsigned block_threads;  // a block's threads
    unsigned cluster;        // blocks a cluster (1: none)
    unsigned active;         // the rank whose shared memory the section holds
    unsigned char* images;   // each rank's shared memory while another's is in the section
    size_t dyn_bytes;        // the launch's dynamic shared memory
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
inline char message[512];

// %globaltimer: the host's monotonic clock in nanoseconds.
inline unsigned long long globaltimer() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

// The dynamic shared memory of a block (`extern __shared__`), in this module's static storage so
// that the 32-bit shared addresses of cp.async and ldmatrix reach it and the static `__shared__`
// variables alike (both lie within 2 GiB of `dyn_smem`).
alignas(1024) __attribute__((section("emu_smem"))) inline unsigned char dyn_smem[232448];

// A block's static `__shared__` variables: translate.py rewrites each declaration into a reference
// to `static_shared`, placed at its first use in this arena (beside `dyn_smem`, in the section that
// a cluster's blocks swap in and out: `activate`). GCC 12 drops a section attribute on the static
// locals of templates, so the kernels' own statics cannot lie there.
constexpr size_t STATIC_SMEM_BYTES = 1 << 20;
alignas(1024) __attribute__((section("emu_smem"))) inline unsigned char static_smem[STATIC_SMEM_BYTES];
inline size_t static_smem_used;
inline unsigned char* static_alloc(size_t bytes, size_t align) {
    const size_t at = (static_smem_used + align - 1) / align * align;
    if (at + bytes > STATIC_SMEM_BYTES) {
        fprintf(stderr, "cuda-emu: the kernels' static shared variables pass the emulator's %zu bytes\n", STATIC_SMEM_BYTES);
        abort();
    }
    static_smem_used = at + bytes;
    return static_smem + at;
}
// Declaration `ID` of the module (one for every instance of a template), of type T.
template <class T, size_t ALIGN, int ID>
inline T& static_shared() {
    static T* const at = (T*)static_alloc(sizeof(T), ALIGN > alignof(T) ? ALIGN : alignof(T));
    return *at;
}

}  // namespace emu

// The shared-memory section's bounds (the linker's, this module's own).
extern "C" unsigned char __start_emu_smem[] __attribute__((visibility("hidden")));
extern "C" unsigned char __stop_emu_smem[] __attribute__((visibility("hidden")));

#define threadIdx (emu::g.cur->tid)
#define blockIdx (emu::g.cur->block)
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

inline size_t smem_section_bytes() { return (size_t)(__stop_emu_smem - __start_emu_smem); }

// Puts rank `cta`'s shared memory (the static variables placed so far and the launch's dynamic
// bytes) in the section, keeping the one there in its image (laid out as the section): a
// cluster's blocks run together, each thread with its own block's.
inline void activate(unsigned cta) {
    if (cta == g.active) return;
    const size_t n = smem_section_bytes();
    unsigned char* const out = g.images + (size_t)g.active * n;
    const unsigned char* const in = g.images + (size_t)cta * n;
    const size_t s0 = (size_t)(static_smem - __start_emu_smem), d0 = (size_t)(dyn_smem - __start_emu_smem);
    memcpy(out + s0, static_smem, static_smem_used);
    memcpy(static_smem, in + s0, static_smem_used);
    memcpy(out + d0, dyn_smem, g.dyn_bytes);
    memcpy(dyn_smem, in + d0, g.dyn_bytes);
    g.active = cta;
}

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
                activate(t->cta);
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
    if (count == 0 || count % 32 != 0 || count > g.block_threads) fail("bar.sync: a thread count that is not whole warps of the block");
    if (id == 0 && count == g.block_threads) return block_barrier();
    if (id == 0) fail("bar.sync: barrier 0 with fewer threads than the block's (__syncthreads' own)");
    g.cur->bar_id = id;
    g.cur->bar_count = count;
    g.cur->state = AT_NAMED;
    yield();
}

// barrier.cluster.arrive then .wait: every live thread of the cluster (of the block without one).
inline void cluster_barrier() {
    g.cur->state = AT_CLUSTER;
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
// The byte at shared address `a` of rank `cta`'s block (its image while another's is active).
inline unsigned char* smem_at(unsigned cta, unsigned a) {
    unsigned char* p = dyn_smem + (int)a;
    if (cta == g.active) return p;
    if (cta >= g.cluster) fail("a shared address of a rank past the cluster's");
    if (p < __start_emu_smem || p >= __stop_emu_smem) {
        snprintf(message, sizeof message, "shared address %d of rank %u outside shared memory (%ld..%ld)", (int)a, cta,
                 (long)(__start_emu_smem - dyn_smem), (long)(__stop_emu_smem - dyn_smem));
        fail(message);
    }
    return g.images + (size_t)cta * smem_section_bytes() + (p - __start_emu_smem);
}

// st.shared.u32: a word into shared memory at a shared-window address.
inline void st_shared_u32(unsigned a, unsigned v) { memcpy(smem_ptr(a), &v, sizeof v); }

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
inline MmaSlots mma_slots[MAX_FIBERS / 32][2];

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

// ---- Hopper: mbarriers, TMA tile copies, warpgroup MMA ----
//
// An mbarrier's 8 bytes here: pending arrivals (bits 0..15), the arrival count (16..30), the
// current phase's parity (31), and the pending transaction bytes as a signed word (32..63). A phase
// completes when no arrival and no byte is pending: the parity flips and the count is re-armed.
// `try_wait.parity P` is true once the phase of parity P has completed (the current parity is
// not P); a thread whose wait is not yet true waits (AT_MBAR) until the scheduler sees it is.
struct Mbar {
    unsigned lo;  // pending arrivals, count, parity
    int tx;       // pending transaction bytes
};
inline Mbar mbar_get(unsigned cta, unsigned a) {
    Mbar m;
    memcpy(&m, smem_at(cta, a), sizeof m);
    return m;
}
// Stores the barrier of rank `cta`, completing its phase first if nothing is pending.
inline void mbar_put(unsigned cta, unsigned a, Mbar m) {
    if ((m.lo & 0xffffu) == 0 && m.tx == 0) {
        const unsigned count = m.lo >> 16 & 0x7fffu, parity = m.lo >> 31;
        m.lo = (parity ^ 1u) << 31 | count << 16 | count;
    }
    memcpy(smem_at(cta, a), &m, sizeof m);
}
inline void mbar_init(unsigned a, unsigned count) {
    if (a % 8 != 0) fail("mbarrier.init: an address that is not 8-byte aligned");
    if (count == 0 || count > 0x7fffu) fail("mbarrier.init: a count of 0 or past what the emulator keeps");
    const Mbar m{count << 16 | count, 0};
    memcpy(smem_ptr(a), &m, sizeof m);
}
inline void mbar_arrive_at(unsigned cta, unsigned a, unsigned tx_bytes) {
    Mbar m = mbar_get(cta, a);
    if ((m.lo & 0xffffu) == 0) fail("mbarrier.arrive: more arrivals in a phase than the barrier counts");
    m.lo -= 1;
    m.tx += (int)tx_bytes;
    mbar_put(cta, a, m);
}
inline void mbar_arrive(unsigned a, unsigned tx_bytes) { mbar_arrive_at(g.cur->cta, a, tx_bytes); }
// mapa.shared::cluster then mbarrier.arrive.shared::cluster: an arrival on rank `cta`'s barrier at
// the same offset as `a` in this block.
inline void mbar_arrive_remote(unsigned a, unsigned cta) {
    if (cta >= g.cluster) fail("mapa: a rank past the cluster's");
    mbar_arrive_at(cta, a, 0);
}
inline void mbar_complete_tx(unsigned cta, unsigned a, unsigned bytes) {
    Mbar m = mbar_get(cta, a);
    m.tx -= (int)bytes;
    mbar_put(cta, a, m);
}
// mapa.shared::cluster of a data and a barrier address, then
// st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32: four words into rank `cta`'s shared
// memory at the same offset as `a` in this block, completing 16 bytes on its barrier at `bar`.
inline void st_async_v4(unsigned a, unsigned cta, unsigned bar, unsigned w0, unsigned w1, unsigned w2, unsigned w3) {
    if (cta >= g.cluster) fail("mapa: a rank past the cluster's");
    if (a % 16 != 0) fail("st.async.v4: an address that is not 16-byte aligned");
    const unsigned w[4] = {w0, w1, w2, w3};
    memcpy(smem_at(cta, a), w, sizeof w);
    mbar_complete_tx(cta, bar, sizeof w);
}
inline bool mbar_phase_done(unsigned cta, unsigned a, unsigned parity) {
    return (mbar_get(cta, a).lo >> 31) != (parity & 1u);
}
// mbarrier.try_wait.parity as plumb's wait loops use it: returns (true) once the phase is done.
inline unsigned mbar_wait(unsigned a, unsigned parity) {
    if (!mbar_phase_done(g.cur->cta, a, parity)) {
        g.cur->bar_id = a;
        g.cur->bar_count = parity & 1u;
        g.cur->state = AT_MBAR;
        yield();
    }
    return 1;
}

// cp.async.bulk.tensor.{1..5}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes: the box
// at element coordinates c (innermost first) of `map` into shared memory at `dst` (the box's rows,
// its innermost extent each, one after another in the order of the outer coordinates, each
// 16-byte chunk moved by the map's swizzle), zeros where the box leaves the tensor, then the
// box's bytes completed on the barrier at `bar`. The copy happens at once (a TMA copy's bytes land
// before the barrier's phase can complete, which is all a kernel may rely on).
struct I5 {
    int v[5];
};
inline void tma_load_to(unsigned cta, int rank, unsigned dst, const void* map_ptr, I5 c, unsigned bar) {
    TensorMap m;
    memcpy(&m, map_ptr, sizeof m);
    if (m.magic != TENSOR_MAP_MAGIC) fail("cp.async.bulk.tensor: a tensor map cuTensorMapEncodeTiled did not write");
    if ((int)m.rank != rank) fail("cp.async.bulk.tensor: coordinates of another rank than the map's");
    const unsigned es = m.elem_bytes, row_bytes = m.box[0] * es;
    if (dst % 128 != 0) fail("cp.async.bulk.tensor: a shared destination not 128-byte aligned");
    if (m.swizzle && row_bytes != (16u << m.swizzle))
        fail("cp.async.bulk.tensor: a swizzled box narrower than its span (not modeled)");
    const unsigned char* base = (const unsigned char*)(uintptr_t)m.address;
    const unsigned rows = m.box[1] * m.box[2] * m.box[3] * m.box[4];
    for (unsigned r = 0; r < rows; r++) {
        // Row r of the box: its index in each outer dimension, the innermost of them fastest.
        long long off = 0;
        bool inside = true;
        unsigned rest = r;
        for (int d = 1; d < 5; d++) {
            const long long i = (long long)c.v[d] + rest % m.box[d];
            rest /= m.box[d];
            if (i < 0 || i >= (long long)m.dims[d]) inside = false;
            if (d < rank) off += i * (long long)m.strides[d - 1];
        }
        for (unsigned b = 0; b < row_bytes; b += es) {
            const long long col = (long long)c.v[0] + b / es;
            unsigned char* d = smem_at(cta, swizzle_address(dst + r * row_bytes + b, m.swizzle));
            if (inside && col >= 0 && col < (long long)m.dims[0])
                memcpy(d, base + off + col * es, es);
            else
                memset(d, 0, es);
        }
    }
    mbar_complete_tx(cta, bar, rows * row_bytes);
}
inline void tma_load(int rank, unsigned dst, const void* map_ptr, I5 c, unsigned bar) {
    tma_load_to(g.cur->cta, rank, dst, map_ptr, c, bar);
}
// ....multicast::cluster: the same box into every rank of `mask`, at the same offsets in each.
inline void tma_load_multicast(int rank, unsigned dst, const void* map_ptr, I5 c, unsigned bar, unsigned mask) {
    if (mask == 0 || mask >> g.cluster) fail("cp.async.bulk.tensor.multicast: a mask of ranks the cluster lacks");
    for (unsigned r = 0; r < g.cluster; r++)
        if (mask >> r & 1) tma_load_to(r, rank, dst, map_ptr, c, bar);
}

// wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}: issued into the thread's queue and done
// when a wgmma.wait_group lets its group complete, reading shared memory and the accumulator
// registers then (a kernel that changes either before its wait sees that here, as it could on a
// GPU). Each of the thread's N / 2 accumulators is computed from the exact products summed in
// double onto the accumulator (or 0 under scale-d 0) and rounded once, as mma_m16n8k16 does, so
// the two instructions agree here on the same operands (not the GPU's bits). Accumulator i of
// thread t of the warpgroup: row 16 (t / 32) + (t % 32) / 4 + 8 ((i / 2) % 2), column
// 8 (i / 4) + 2 (t % 4) + i % 2. A comes from a shared-memory descriptor or (the register form)
// from the warp's fragments, laid out as mma.sync's A, captured at issue.
struct WgmmaOp {
    int n, scale_d, scale_a, scale_b, tnsp_a, tnsp_b;
    bool bf16, regs_a;
    unsigned long long da, db;
    float* d[128];
    unsigned a[32][4];
};
struct WgmmaQueue {
    WgmmaOp* ops = nullptr;
    unsigned num = 0, cap = 0;
    unsigned groups[64];  // the ops before each committed group's end, oldest first
    unsigned num_groups = 0;
};
inline WgmmaQueue wg_queues[MAX_FIBERS];
inline MmaSlots wg_slots[MAX_FIBERS / 32][2];

// Element (row, k) of a K-major operand (row: M for A, N for B), or (k, row) of an MN-major one,
// at descriptor `desc`: no swizzle (8 x 16-byte core matrices: rows 16 bytes apart, 8-row groups
// SBO apart, 8-element K groups LBO apart; MN-major: K rows 16 bytes apart, 8-K groups LBO
// apart, 8-element MN groups SBO apart) or the 128-byte swizzle (K-major: 128-byte rows, 8-row
// atoms SBO apart).
template <bool BF16>
inline float wg_operand(unsigned long long desc, int row, int k, int mn_major) {
    const unsigned start = (unsigned)(desc & 0x3fff) << 4, lbo = (unsigned)(desc >> 16 & 0x3fff) << 4,
                   sbo = (unsigned)(desc >> 32 & 0x3fff) << 4, base_offset = (unsigned)(desc >> 49 & 7),
                   mode = (unsigned)(desc >> 62);
    if (base_offset) fail("wgmma: a descriptor base offset (not modeled)");
    unsigned a;
    if (!mn_major && mode == 0) {
        a = start + row / 8 * sbo + k / 8 * lbo + row % 8 * 16 + k % 8 * 2;
    } else if (!mn_major && mode == 1) {
        a = swizzle_address(start + row / 8 * sbo + row % 8 * 128 + k * 2, 3);
    } else if (mn_major && mode == 0) {
        a = start + row / 8 * sbo + k / 8 * lbo + k % 8 * 16 + row % 8 * 2;
    } else {
        fail("wgmma: a 32- or 64-byte swizzle, or an MN-major swizzled operand (not modeled)");
    }
    unsigned short h;
    memcpy(&h, smem_ptr(a), 2);
    return wide16<BF16>(h);
}

template <bool BF16>
inline void wgmma_run(const WgmmaOp& op, unsigned lin) {
    const unsigned w = lin >> 5 & 3, lane = lin & 31, gq = lane >> 2, t4 = lane & 3;
    double A[2][16];
    for (int r = 0; r < 2; r++) {
        const int m = 16 * (int)w + (int)gq + 8 * r;
        for (int k = 0; k < 16; k++) {
            float v;
            if (op.regs_a) {
                const int rr = m % 16;
                const unsigned word = op.a[(rr & 7) * 4 + ((k & 7) >> 1)][(rr >> 3) + 2 * (k >> 3)];
                v = wide16<BF16>(k & 1 ? word >> 16 : word & 0xffffu);
            } else {
                v = wg_operand<BF16>(op.da, m, k, op.tnsp_a);
            }
            A[r][k] = (double)v * op.scale_a;
        }
    }
    for (int j = 0; j < op.n / 8; j++) {
        double B[2][16];
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < 16; k++)
                B[c][k] = (double)wg_operand<BF16>(op.db, 8 * j + 2 * (int)t4 + c, k, op.tnsp_b) * op.scale_b;
        for (int e = 0; e < 4; e++) {
            float* d = op.d[4 * j + e];
            double acc = op.scale_d ? (double)*d : 0.0;
            for (int k = 0; k < 16; k++) acc += A[e >> 1][k] * B[e & 1][k];
            *d = (float)acc;
        }
    }
}

// The four 32-bit A fragment registers of the register form.
struct U4 {
    unsigned v[4];
};

template <bool BF16, int N>
inline void wgmma_issue(std::initializer_list<float*> d, bool regs_a, U4 a, unsigned long long da,
                        unsigned long long db, int scale_d, int scale_a, int scale_b, int tnsp_a, int tnsp_b) {
    static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma: N of 8 to 256");
    Thread* t = g.cur;
    if (t->in_cta / 128 * 128 + 128 > g.block_threads) fail("wgmma: a thread of a warpgroup the block does not hold whole");
    if (d.size() != N / 2) fail("wgmma: not N / 2 accumulators");
    WgmmaQueue& q = wg_queues[t->lin];
    if (q.num == q.cap) {
        q.cap = q.cap ? 2 * q.cap : 16;
        q.ops = (WgmmaOp*)realloc(q.ops, q.cap * sizeof(WgmmaOp));
        if (!q.ops) fail("wgmma: no memory for the queue");
    }
    WgmmaOp& op = q.ops[q.num++];
    op.n = N, op.scale_d = scale_d != 0, op.scale_a = scale_a, op.scale_b = scale_b, op.tnsp_a = tnsp_a,
    op.tnsp_b = tnsp_b, op.bf16 = BF16, op.regs_a = regs_a, op.da = da, op.db = db;
    int i = 0;
    for (float* p : d) op.d[i++] = p;
    if (regs_a) {
        // The warp's A fragments, as they are at issue.
        const unsigned lane = t->lin & 31, buf = t->exchanges++ & 1;
        MmaSlots& s = wg_slots[t->lin >> 5][buf];
        for (int r = 0; r < 4; r++) s.a[lane][r] = a.v[r];
        warp_barrier(0xffffffffu);
        memcpy(op.a, s.a, sizeof op.a);
    }
}

inline void wgmma_commit() {
    WgmmaQueue& q = wg_queues[g.cur->lin];
    if (q.num_groups == 64) fail("wgmma.commit_group: more than 64 groups pending (the emulator's limit)");
    q.groups[q.num_groups++] = q.num;
}

// wgmma.wait_group N: the oldest committed groups complete until at most N are pending.
inline void wgmma_wait(unsigned pending) {
    WgmmaQueue& q = wg_queues[g.cur->lin];
    if (q.num_groups <= pending) return;
    const unsigned done_groups = q.num_groups - pending, done_ops = q.groups[done_groups - 1];
    for (unsigned i = 0; i < done_ops; i++) {
        if (q.ops[i].bf16) wgmma_run<true>(q.ops[i], g.cur->in_cta);
        else wgmma_run<false>(q.ops[i], g.cur->in_cta);
    }
    memmove(q.ops, q.ops + done_ops, (q.num - done_ops) * sizeof(WgmmaOp));
    q.num -= done_ops;
    for (unsigned i = done_groups; i < q.num_groups; i++) q.groups[i - done_groups] = q.groups[i] - done_ops;
    q.num_groups -= done_groups;
}

// A thread that returns with wgmma work never waited for: an error, as its results were lost.
inline void wgmma_check_drained() {
    WgmmaQueue& q = wg_queues[g.cur->lin];
    if (q.num) {
        q.num = q.num_groups = 0;
        fail("wgmma: a thread returned with warpgroup MMAs it never waited for");
    }
}
inline void wgmma_reset(unsigned lin) { wg_queues[lin].num = wg_queues[lin].num_groups = 0; }

}  // namespace emu

// Barriers, shuffles and votes.
inline void __syncthreads() { emu::block_barrier(); }
inline int __syncthreads_count(int pred) {
    int& count = emu::static_shared<int, 4, -1>();
    emu::block_barrier();
    if (emu::g.cur->in_cta == 0) count = 0;
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
