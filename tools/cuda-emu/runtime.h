// The scheduler of an emulated module (see prelude.h): runs a launch's blocks (or clusters of
// blocks) one after another, each one's threads as fibers that switch at barriers. translate.py appends this after the
// kernels, then the table of the module's `extern "C"` kernels (`emu_kernels`).
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

namespace emu {

struct Kernel {
    const char* name;
    void* fn;
    void (*call)(void* fn, void** params);
    int num_params;
    const unsigned* sizes;  // each parameter's size in bytes (what a captured launch copies)
};

template <class... A>
struct Caller {
    // A parameter's bytes may sit at any alignment (the caller's argument buffer): copied out.
    template <class T>
    static T load(const void* p) {
        typename std::remove_cv<T>::type v;
        memcpy((void*)&v, p, sizeof v);
        return v;
    }
    template <size_t... I>
    static void go(void* f, void** p, std::index_sequence<I...>) {
        ((void (*)(A...))f)(load<A>(p[I])...);
    }
    static void call(void* f, void** p) { go(f, p, std::index_sequence_for<A...>{}); }
    static constexpr unsigned sizes[sizeof...(A) + 1] = {(unsigned)sizeof(A)..., 0};
};

template <class... A>
Kernel kernel(const char* name, void (*f)(A...)) {
    return {name, (void*)f, &Caller<A...>::call, (int)sizeof...(A), Caller<A...>::sizes};
}

constexpr unsigned MAX_THREADS = 1024;
// Fibers' stacks, one after another in huge pages (the switches touch every stack of a block in
// turn); each ends in a canary a block's end checks, in place of guard pages (which would split
// the huge pages).
constexpr size_t STACK_BYTES = 64 * 1024;
constexpr unsigned long long CANARY = 0x5ca1ab1ec0ffee00ull;

inline Thread threads[MAX_FIBERS];
inline Warp warps[MAX_FIBERS / 32];
inline unsigned char* stacks;

extern "C" __attribute__((visibility("hidden"))) void emu_fiber_entry() {
    g.call(g.fn, g.params);
    wgmma_check_drained();
    g.cur->state = DONE;
    yield();
    __builtin_unreachable();
}

inline bool make_stacks() {
    if (stacks) return true;
    const size_t bytes = (size_t)MAX_FIBERS * STACK_BYTES;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    madvise(p, bytes, MADV_HUGEPAGE);
    stacks = (unsigned char*)p;
    return true;
}

inline void* fresh_stack(unsigned i) {
    memcpy(stacks + i * STACK_BYTES, &CANARY, sizeof CANARY);
    void** sp = (void**)(stacks + (i + 1) * STACK_BYTES) - 8;
    for (int r = 0; r < 6; r++) sp[r] = nullptr;  // r15 r14 r13 r12 rbx rbp
    sp[6] = (void*)&emu_fiber_entry;                 // where the first switch returns to
    sp[7] = nullptr;
    return sp;
}

// Opens what can open in one block of `n` threads at `ts`: its barrier when every live thread
// waits at it, else its named barriers, mbarriers and each warp whose waiting lanes' masks cover
// only waiting (or finished) lanes. False: nothing could open.
inline bool open_block(Thread* ts, unsigned n) {
    unsigned live = 0, at_block = 0;
    for (unsigned i = 0; i < n; i++) {
        live += ts[i].state != DONE;
        at_block += ts[i].state == AT_BLOCK;
    }
    if (live && at_block == live) {
        for (unsigned i = 0; i < n; i++)
            if (ts[i].state == AT_BLOCK) ts[i].state = RUN;
        return true;
    }
    bool opened = false;
    // A named barrier opens when as many threads wait at it as it counts (all naming one count).
    for (unsigned id = 1; id < 16; id++) {
        unsigned at = 0, count = 0;
        for (unsigned i = 0; i < n; i++) {
            const Thread& t = ts[i];
            if (t.state != AT_NAMED || t.bar_id != id) continue;
            if (count && t.bar_count != count) {
                snprintf(message, sizeof message, "bar.sync %u: threads wait with counts %u and %u", id, count, t.bar_count);
                g.error = message;
                return false;
            }
            count = t.bar_count;
            at++;
        }
        if (at && at >= count) {
            if (at > count) {
                snprintf(message, sizeof message, "bar.sync %u: %u threads wait at a barrier of %u", id, at, count);
                g.error = message;
                return false;
            }
            for (unsigned i = 0; i < n; i++)
                if (ts[i].state == AT_NAMED && ts[i].bar_id == id) ts[i].state = RUN;
            opened = true;
        }
    }
    // A thread at an mbarrier goes on once the phase it waits for has completed.
    for (unsigned i = 0; i < n; i++) {
        Thread& t = ts[i];
        if (t.state == AT_MBAR && mbar_phase_done(t.cta, t.bar_id, t.bar_count)) {
            t.state = RUN;
            opened = true;
        }
    }
    for (unsigned w = 0; w * 32 < n; w++) {
        unsigned waiting = 0, need = 0, unfinished = 0;
        for (unsigned l = 0; l < 32 && w * 32 + l < n; l++) {
            const Thread& t = ts[w * 32 + l];
            if (t.state != DONE) unfinished |= 1u << l;
            if (t.state == AT_WARP) {
                waiting |= 1u << l;
                need |= t.mask;
            }
        }
        if (waiting && (need & unfinished & ~waiting) == 0) {
            for (unsigned l = 0; l < 32; l++)
                if (waiting >> l & 1) ts[w * 32 + l].state = RUN;
            opened = true;
        }
    }
    return opened;
}

// Opens what can open in each block of the cluster, then the cluster's barrier when every live
// thread of it waits there. False: nothing could open.
inline bool open_barriers(unsigned n) {
    bool opened = false;
    for (unsigned first = 0; first < n; first += g.block_threads) {
        opened |= open_block(threads + first, g.block_threads);
        if (g.error) return false;
    }
    unsigned live = 0, at = 0;
    for (unsigned i = 0; i < n; i++) {
        live += threads[i].state != DONE;
        at += threads[i].state == AT_CLUSTER;
    }
    if (live && at == live) {
        for (unsigned i = 0; i < n; i++) threads[i].state = threads[i].state == AT_CLUSTER ? RUN : threads[i].state;
        opened = true;
    }
    return opened;
}

// Runs the blocks of one cluster (one block without clusters) from block `first` (linear, x
// fastest: a cluster's blocks are consecutive in x) to the end, `g.block_threads` threads each.
inline const char* run_cluster(unsigned long long first, bool reverse) {
    const unsigned n = g.num_threads, nb = g.block_threads;
    for (unsigned i = 0; i < n; i++) {
        Thread& t = threads[i];
        const unsigned j = i % nb;
        const unsigned long long b = first + i / nb;
        t.lin = i;
        t.in_cta = j;
        t.cta = i / nb;
        t.tid = {j % g.block_dim.x, j / g.block_dim.x % g.block_dim.y, j / (g.block_dim.x * g.block_dim.y)};
        t.block = {(unsigned)(b % g.grid_dim.x), (unsigned)(b / g.grid_dim.x % g.grid_dim.y),
                   (unsigned)(b / g.grid_dim.x / g.grid_dim.y)};
        t.state = RUN;
        t.exchanges = 0;
        t.mask = 0;
        t.sp = fresh_stack(i);
        wgmma_reset(i);
    }
    g.reverse = reverse;
    for (;;) {
        for (unsigned j = 0; j < n; j++) {
            Thread& t = threads[reverse ? n - 1 - j : j];
            while (t.state == RUN) {
                g.cur = &t;
                activate(t.cta);
                emu_switch_ctx(&g.sched_sp, t.sp);
                if (g.error) return g.error;
            }
        }
        bool any = false;
        for (unsigned i = 0; i < n; i++) any |= threads[i].state != DONE;
        if (!any) {
            for (unsigned i = 0; i < n; i++)
                if (memcmp(stacks + i * STACK_BYTES, &CANARY, sizeof CANARY) != 0) return "a thread overran its 64 KiB stack";
            return nullptr;
        }
        if (!open_barriers(n)) {
            if (g.error) return g.error;
            unsigned at_block = 0, at_warp = 0, at_named = 0, at_mbar = 0, at_cluster = 0;
            for (unsigned i = 0; i < n; i++) {
                at_block += threads[i].state == AT_BLOCK;
                at_warp += threads[i].state == AT_WARP;
                at_named += threads[i].state == AT_NAMED;
                at_mbar += threads[i].state == AT_MBAR;
                at_cluster += threads[i].state == AT_CLUSTER;
            }
            const uint3 b = threads[0].block;
            snprintf(message, sizeof message,
                     "deadlock in block (%u,%u,%u)%s: %u threads wait at __syncthreads, %u at a warp barrier, %u at "
                     "named barriers, %u at mbarriers, %u at the cluster's barrier, the others have returned",
                     b.x, b.y, b.z, g.cluster > 1 ? "'s cluster" : "", at_block, at_warp, at_named, at_mbar, at_cluster);
            return message;
        }
    }
}

}  // namespace emu

// One launch, run to completion, as grid `grid_id` (%gridid), its blocks in clusters of `cluster`
// along x (1: none). `order`: bit 0 runs the blocks (clusters) last to first, bit 1 each block's
// (cluster's) threads last to first (orders a correct kernel does not depend on). Returns null, or
// what went wrong.
extern "C" const char* emu_launch(const emu::Kernel* k, const unsigned grid[3], const unsigned block[3], unsigned smem,
                                  void** params, unsigned order, unsigned long long grid_id, unsigned cluster) {
    using namespace emu;
    const unsigned n = block[0] * block[1] * block[2];
    if (n == 0 || n > MAX_THREADS) return "a block of 0 or more than 1024 threads";
    if (smem > sizeof dyn_smem) return "more dynamic shared memory than a block may have";
    if (cluster == 0 || cluster > 8 || grid[0] % cluster != 0) return "a cluster of 0 or more than 8 blocks, or a grid's x not a multiple of it";
    if (cluster > 1 && (n % 32 != 0 || n * cluster > MAX_FIBERS))
        return "a cluster whose blocks are not whole warps or hold more than 4096 threads together (not modeled)";
    if (!make_stacks()) return "no memory for the fibers' stacks";
    static unsigned char* images;
    static size_t image_bytes;
    const size_t section = smem_section_bytes();
    if (cluster > 1 && image_bytes < cluster * section) {
        free(images);
        image_bytes = cluster * section;
        images = (unsigned char*)malloc(image_bytes);
        if (!images) {
            image_bytes = 0;
            return "no memory for the cluster's shared memory";
        }
    }
    g = Global{};
    g.block_dim = {block[0], block[1], block[2]};
    g.grid_dim = {grid[0], grid[1], grid[2]};
    g.threads = threads;
    g.warps = warps;
    g.block_threads = n;
    g.cluster = cluster;
    g.num_threads = n * cluster;
    g.images = images;
    g.dyn_bytes = smem;
    g.call = k->call;
    g.fn = k->fn;
    g.params = params;
    g.grid_id = grid_id;
    const unsigned long long clusters = (unsigned long long)grid[0] * grid[1] * grid[2] / cluster;
    for (unsigned long long c = 0; c < clusters; c++) {
        const unsigned long long i = order & 1 ? clusters - 1 - c : c;
        g.active = 0;
        memset(dyn_smem, 0xff, smem);
        // Every other rank starts from the same bytes (its statics as the last block left them).
        for (unsigned r = 1; r < cluster; r++) memcpy(images + r * section, __start_emu_smem, section);
        if (const char* e = run_cluster(i * cluster, order & 2)) return e;
        activate(0);
    }
    return nullptr;
}
