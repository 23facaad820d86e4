// The TMA kernels' synchronisation and copies (linear_tma.cu, linear_tma_instances.cu): wgmma's
// shared-memory descriptors, mbarriers, TMA tile copies (multicast into a cluster too), arrivals
// on a peer CTA's barrier, the cluster barrier, and the K split over a cluster's CTAs
// (`ks_fold_chunk`: a chunk's partial handed to rank 0 by st.async and folded there in chunk
// order). Split from linear_tma.cu by meaning; included just before it (compile.rs).

// K-major operand with 128-byte swizzle: rows of 64 bf16 (128 bytes), 8-row atoms 1024 bytes
// apart; a k16 step inside the row starts 32 bytes further.
__device__ __forceinline__ u64 tma_desc(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Waits until the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done = 0;
    while (!done) {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    }
}

// A CUtensorMap, passed by value as a __grid_constant__ kernel parameter.
struct __align__(64) TmaMap {
    u64 opaque[16];
};

// The tile at (k, row) of `map` into shared memory at `dst`, completing its bytes on `bar`.
__device__ __forceinline__ void tma_load_2d(u32 dst, const TmaMap* map, int k, int row, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
        "[%4];\n" ::"r"(dst),
        "l"((u64)map), "r"(k), "r"(row), "r"(bar)
        : "memory");
}

// The box at (c0, c1, c2, c3) of a rank-4 `map` into shared memory at `dst`, completing its bytes
// on `bar`.
__device__ __forceinline__ void tma_load_4d(u32 dst, const TmaMap* map, int c0, int c1, int c2, int c3, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];\n" ::"r"(dst),
        "l"((u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
}

// The tile at (k, row) of `map` into shared memory at `dst` of every CTA of the cluster in `mask`,
// completing its bytes on each one's barrier at `bar` (the same offsets in each).
__device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const TmaMap* map, int k, int row, u32 bar,
                                                      unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
        "[%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
        "l"((u64)map), "r"(k), "r"(row), "r"(bar), "h"(mask)
        : "memory");
}

// An arrival on the barrier at `bar` of CTA `cta` of this cluster. Default semantics (release at
// CTA scope), as CUTLASS's cluster barrier arrives: what it releases are this warp's reads of the
// stage, complete at the wgmma wait before it. `.release.cluster` compiled to MEMBAR.ALL.GPU before
// every arrival, a stage and warp, and halved the clustered products' speed (session 31's SASS).
__device__ __forceinline__ void mbar_arrive_cluster(u32 bar, u32 cta) {
    asm volatile(
        "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
        "r"(cta)
        : "memory");
}

// Every thread of every CTA of the cluster, past what each did before (memory included).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// Four words into shared memory at `addr` of CTA `cta` of this cluster (the same offset as in
// this block), completing 16 bytes on that CTA's barrier at `bar` (the same offset too): the
// receiver learns of them by its barrier's phase, no fence on either side.
__device__ __forceinline__ void st_async_v4(u32 addr, u32 cta, float a, float b, float c, float d, u32 bar) {
    asm volatile(
        "{\n.reg .b32 ra, rb;\nmapa.shared::cluster.u32 ra, %0, %1;\nmapa.shared::cluster.u32 rb, %2, %1;\n"
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [ra], {%3, %4, %5, %6}, [rb];\n}\n" ::"r"(addr),
        "r"(cta), "r"(bar), "r"(__float_as_uint(a)), "r"(__float_as_uint(b)), "r"(__float_as_uint(c)),
        "r"(__float_as_uint(d))
        : "memory");
}

// Bytes of one rank's slot of a K split over a cluster (`ks_fold_chunk`): each of the 256
// consumer threads' NW / 2 sums. `tma::ks_slot_bytes` sizes the launch from the same formula.
__host__ __device__ constexpr int ks_slot_bytes(int nw) { return 256 * (nw / 2) * 4; }

// K split over the KS CTAs of a cluster (the `_s2` / `_s4` instances): rank r of a task takes its
// chunks r, r + KS, r + 2 KS, … (a round of the task is KS consecutive chunks, one a rank), and
// rank 0 folds them all in chunk order, as the unsplit kernel does in registers: its own chunk's
// sums `d` onto `acc` (from 0 at the task's first chunk), then rank 1's of the next chunk, rank
// 2's, … Each other rank hands its `d` over with st.async into its slot past rank 0's stages
// (`recv`: slot r - 1, the thread's sums in 16-byte pieces, piece-major), completing the bytes on
// rank 0's `kfull`, after rank 0 has freed the slot (rank 0's consumer warps arrive on the
// sender's `kfree` once they have read it). So the sums cross the cluster once and are folded
// as they come, with no partials in global memory, no arrival counters and no fold launch: the
// fold of `fold_column`, the same bits. `senders`: the ranks past 0 with a chunk this round;
// `rounds` / `sent`: this CTA's phases of `kfull` (rank 0) or `kfree` (the others) so far.
template <int NW, int KS>
__device__ __forceinline__ void ks_fold_chunk(float (&acc)[NW / 2], const float (&d)[NW / 2], bool first, int krank,
                                              int senders, u32 kfull, u32 kfree, u32 recv, const u8* recv_ptr,
                                              int& rounds, int& sent) {
    constexpr int PIECES = NW / 8;
    const int tid = threadIdx.x, lane = threadIdx.x % 32;
    if (krank == 0) {
#pragma unroll
        for (int e = 0; e < NW / 2; e++) acc[e] = __fadd_rn(first ? 0.0f : acc[e], d[e]);
        if (senders == 0) return;
        if (tid == 0) mbar_expect_tx(kfull, senders * ks_slot_bytes(NW));
        mbar_wait(kfull, rounds & 1);
        rounds++;
        const float4* slots = reinterpret_cast<const float4*>(recv_ptr);
        for (int r = 0; r < senders; r++) {
#pragma unroll
            for (int p = 0; p < PIECES; p++) {
                const float4 v = slots[(r * PIECES + p) * 256 + tid];
                acc[4 * p] = __fadd_rn(acc[4 * p], v.x);
                acc[4 * p + 1] = __fadd_rn(acc[4 * p + 1], v.y);
                acc[4 * p + 2] = __fadd_rn(acc[4 * p + 2], v.z);
                acc[4 * p + 3] = __fadd_rn(acc[4 * p + 3], v.w);
            }
        }
        // The slots are read (their values added above): each sender may write its next ones.
        __syncwarp();
        if (lane == 0)
            for (int r = 1; r <= senders; r++) mbar_arrive_cluster(kfree, r);
        return;
    }
    if (sent > 0) mbar_wait(kfree, (sent - 1) & 1);
    sent++;
#pragma unroll
    for (int p = 0; p < PIECES; p++)
        st_async_v4(recv + ((krank - 1) * PIECES + p) * 4096 + tid * 16, 0, d[4 * p], d[4 * p + 1], d[4 * p + 2],
                    d[4 * p + 3], kfull);
}
