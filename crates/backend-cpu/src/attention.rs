//! Paged causal attention with grouped-query heads, and the K/V store it reads.
//! Each (row, head) is computed alone: scores over positions 0..=position in position order, a
//! softmax whose sums run in a fixed lane order over positions, then the V sum in position order
//! (heads sharing a KV head are computed side by side, which changes no head's arithmetic).
//! Nothing depends on which other rows share the batch or whether K/V came from an earlier step.

use crate::SharedOut;
use crate::pool::Pool;
use crate::simd::{F32x16, Isa, LANES, exp, simd_dispatch};
use plumb_core::{ForwardBatch, KvSpec, LaneStateStore};

/// The largest head the kernel's register accumulators hold.
pub const MAX_HEAD_DIM: usize = 256;

/// K and V for every layer: [num_slots, num_kv_heads, head_dim] each, f32.
#[derive(Debug)]
pub struct CpuKvCache {
    pub spec: KvSpec,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    /// Per-lane state of the linear-attention layers (`KvSpec::lane_state`).
    pub lane_state: LaneStateStore<f32>,
}

impl CpuKvCache {
    /// Allocates zeroed storage; pages become resident only when written.
    pub fn new(spec: &KvSpec) -> Self {
        let per_layer = spec.num_blocks * spec.block_size * spec.num_kv_heads * spec.head_dim;
        CpuKvCache {
            spec: *spec,
            k: (0..spec.num_layers).map(|_| vec![0f32; per_layer]).collect(),
            v: (0..spec.num_layers).map(|_| vec![0f32; per_layer]).collect(),
            lane_state: LaneStateStore::new(&spec.lane_state),
        }
    }

    /// Bytes its K/V buffers hold, as allocated (all layers, all blocks).
    pub fn kv_allocated_bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(Vec::capacity).sum::<usize>() * 4
    }

    fn slot_len(&self) -> usize {
        self.spec.num_kv_heads * self.spec.head_dim
    }

    /// Writes rows of K and V ([num_rows, num_kv_heads · head_dim]) at their slots.
    pub fn write(&mut self, layer: usize, k: &[f32], v: &[f32], slot_mapping: &[u32]) {
        let len = self.slot_len();
        for (r, &slot) in slot_mapping.iter().enumerate() {
            let at = slot as usize * len;
            self.k[layer][at..at + len].copy_from_slice(&k[r * len..(r + 1) * len]);
            self.v[layer][at..at + len].copy_from_slice(&v[r * len..(r + 1) * len]);
        }
    }
}

/// out = attention(q) for every row and head, split over threads by (row, KV head): the query
/// heads that share a KV head run together, so each K and V row is fetched once for all of them.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    pool: &Pool,
    isa: Isa,
    q: &[f32],
    kv: &CpuKvCache,
    layer: usize,
    batch: &ForwardBatch,
    num_heads: usize,
    scale: f32,
    out: &mut [f32],
) {
    let spec = &kv.spec;
    let head_dim = spec.head_dim;
    assert_eq!(head_dim % LANES, 0, "attention needs head_dim to be a multiple of {LANES}");
    assert_eq!(num_heads % spec.num_kv_heads, 0, "attention: query heads must group evenly over KV heads");
    let num_rows = batch.num_rows();
    let group = num_heads / spec.num_kv_heads;
    let units = num_rows * spec.num_kv_heads;
    assert_eq!(out.len(), num_rows * num_heads * head_dim, "attention: out shape");
    let shared = SharedOut::new(out);
    pool.run(&|t, nt| {
        // Units interleave across threads: with causal attention later rows cost more, so
        // contiguous ranges would leave the first thread idle.
        let range = (t..units).step_by(nt);
        // Per-thread scratch, reused by every unit of the launch.
        let (mut slots, mut scores) = (Vec::new(), Vec::new());
        let mut slots_row = usize::MAX;
        for unit in range {
            let (row, kv_head) = (unit / spec.num_kv_heads, unit % spec.num_kv_heads);
            let ctx = batch.positions[row] as usize + 1;
            // The slot list depends on the row only: heads of one row share it.
            if row != slots_row {
                let lane = batch.row_lane[row] as usize;
                slots.clear();
                slots.extend((0..ctx).map(|p| batch.slot(lane, p) as u32));
                slots_row = row;
            }
            // Query heads kv_head · group .. (kv_head + 1) · group, contiguous in q and out.
            let at = (row * num_heads + kv_head * group) * head_dim;
            let qg = &q[at..][..group * head_dim];
            // SAFETY: each (row, KV head) unit is one thread's and owns its heads' slice of `out`,
            // which outlives `pool.run`.
            let og = unsafe { shared.part(at, group * head_dim) };
            let (k, v) = (&kv.k[layer], &kv.v[layer]);
            let geometry = Geometry { kv_head, num_kv_heads: spec.num_kv_heads, head_dim, scale };
            attend_group(isa, qg, k, v, &slots, geometry, &mut scores, og);
        }
    });
}

/// Where one KV head's rows sit in the cache, and the score scale.
#[derive(Clone, Copy)]
struct Geometry {
    kv_head: usize,
    num_kv_heads: usize,
    head_dim: usize,
    scale: f32,
}

simd_dispatch! {
    #[allow(clippy::too_many_arguments)]
    fn attend_group(q: &[f32], k: &[f32], v: &[f32], slots: &[u32], g: Geometry, scores: &mut Vec<f32>, out: &mut [f32]) => attend_group_kernel
}

/// The query heads in `q` ([heads, head_dim]) against one KV head: for each head, its scores
/// (each one 16-lane FMA chain over head_dim, then the `hsum` tree, taken sixteen positions at
/// a time by `hsum16`, same bits), softmax, and the V sum in position order.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn attend_group_kernel<S: F32x16>(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    slots: &[u32],
    g: Geometry,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let Geometry { kv_head, num_kv_heads, head_dim, scale } = g;
    let ctx = slots.len();
    let num_q = q.len() / head_dim;
    // Kernels avoid closures: they compile without the caller's target features.
    let stride = num_kv_heads * head_dim;
    let base = kv_head * head_dim;
    let padded = ctx.div_ceil(LANES) * LANES;
    // [num_q, padded]; the padding scores are 0 as in a fresh buffer (the exp below reads them).
    scores.clear();
    scores.resize(num_q * padded, 0.0);
    for c in (0..ctx).step_by(LANES) {
        let chunk = &slots[c..(c + LANES).min(ctx)];
        for (h, qh) in q.chunks_exact(head_dim).enumerate() {
            let mut accs = [S::zero(); LANES];
            for (out, &slot) in accs.iter_mut().zip(chunk) {
                let kh = &k[slot as usize * stride + base..][..head_dim];
                // A local accumulator, stored once: through `accs` every FMA would wait on a
                // store-to-load round trip.
                let mut acc = S::zero();
                for j in (0..head_dim).step_by(LANES) {
                    acc = S::load(&qh[j..]).fma(S::load(&kh[j..]), acc);
                }
                *out = acc;
            }
            let mut dots = [0f32; LANES];
            S::hsum16(&accs).mul(S::splat(scale)).store(&mut dots);
            let valid = chunk.len();
            scores[h * padded + c..][..valid].copy_from_slice(&dots[..valid]);
        }
    }
    for (sc, oh) in scores.chunks_exact_mut(padded).zip(out.chunks_exact_mut(head_dim)) {
        softmax_v::<S>(sc, ctx, v, slots, stride, base, head_dim, oh);
    }
}

/// `out` = softmax(scores[..ctx]) · V for one head: the sums run in a fixed lane order over
/// positions, then the V sum in position order.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn softmax_v<S: F32x16>(
    scores: &mut [f32],
    ctx: usize,
    v: &[f32],
    slots: &[u32],
    stride: usize,
    base: usize,
    head_dim: usize,
    out: &mut [f32],
) {
    let mut max = f32::NEG_INFINITY;
    for &s in &scores[..ctx] {
        if s > max {
            max = s;
        }
    }
    let mut sum = S::zero();
    for c in (0..scores.len()).step_by(LANES) {
        let mut p = [0f32; LANES];
        exp(S::load(&scores[c..]).sub(S::splat(max))).store(&mut p);
        let valid = (ctx - c).min(LANES);
        p[valid..].fill(0.0);
        scores[c..c + LANES].copy_from_slice(&p);
        sum = sum.add(S::load(&p));
    }
    let inv = 1.0 / sum.hsum();
    let mut acc = [S::zero(); MAX_HEAD_DIM / LANES];
    let nv = head_dim / LANES;
    assert!(nv <= acc.len(), "head_dim above 256 is not supported");
    for (p, &slot) in scores.iter().zip(slots.iter()) {
        let vh = &v[slot as usize * stride + base..][..head_dim];
        let pv = S::splat(*p);
        for (i, a) in acc.iter_mut().take(nv).enumerate() {
            *a = pv.fma(S::load(&vh[i * LANES..]), *a);
        }
    }
    let inv_v = S::splat(inv);
    for (i, a) in acc.iter().take(nv).enumerate() {
        a.mul(inv_v).store(&mut out[i * LANES..]);
    }
}
