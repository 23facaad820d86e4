//! Paged causal attention with grouped-query heads over the K/V store (`kv_cache`), in whatever
//! element type it keeps.
//! Each (row, head) is computed alone: scores over positions 0..=position in position order, a
//! softmax whose sums run in a fixed lane order over positions, then the V sum in position order
//! (heads sharing a KV head are computed side by side, which changes no head's arithmetic).
//! Nothing depends on which other rows share the batch or whether K/V came from an earlier step.

use crate::SharedOut;
use crate::kv_cache::{Bf16, CpuKvCache, F16, KvElem, KvPlanes, head_len};
use crate::linear::prefetch;
use crate::pool::Pool;
use crate::simd::{F32x16, Isa, LANES, exp, simd_dispatch};
use plumb_core::ForwardBatch;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The largest head the kernel's register accumulators hold.
pub const MAX_HEAD_DIM: usize = 256;

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
    match &kv.planes {
        KvPlanes::F32(p) => attention_in(pool, isa, q, kv, &p.k[layer], &p.v[layer], batch, num_heads, scale, out),
        KvPlanes::F16(p) => attention_in(pool, isa, q, kv, &p.k[layer], &p.v[layer], batch, num_heads, scale, out),
        KvPlanes::Bf16(p) => attention_in(pool, isa, q, kv, &p.k[layer], &p.v[layer], batch, num_heads, scale, out),
    }
}

/// `attention` over one layer's K and V planes of element type `E`.
#[allow(clippy::too_many_arguments)]
fn attention_in<E: Attend>(
    pool: &Pool,
    isa: Isa,
    q: &[f32],
    kv: &CpuKvCache,
    k: &[E],
    v: &[E],
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
    let next = AtomicUsize::new(0);
    pool.run(&|_, _| {
        // Threads take units one at a time from a shared counter: rows cost more the longer
        // their context, and a thread the machine slows down leaves its units to the others.
        let range = std::iter::from_fn(|| Some(next.fetch_add(1, Ordering::Relaxed))).take_while(|&u| u < units);
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
                let bs = batch.block_size;
                for &block in batch.lanes[lane].block_table.iter().take(ctx.div_ceil(bs)) {
                    slots.extend((0..bs).map(|o| block * bs as u32 + o as u32));
                }
                slots.truncate(ctx);
                slots_row = row;
            }
            // Query heads kv_head · group .. (kv_head + 1) · group, contiguous in q and out.
            let at = (row * num_heads + kv_head * group) * head_dim;
            let qg = &q[at..][..group * head_dim];
            // SAFETY: each (row, KV head) unit is one thread's and owns its heads' slice of `out`,
            // which outlives `pool.run`.
            let og = unsafe { shared.part(at, group * head_dim) };
            let geometry = Geometry { kv_head, head_len: head_len(spec), head_dim, scale };
            E::attend_group(isa, qg, k, v, &slots, geometry, &mut scores, og);
        }
    });
}

/// Where one KV head's rows sit in the cache, and the score scale.
#[derive(Clone, Copy)]
struct Geometry {
    kv_head: usize,
    /// Elements of one KV head's rows (the cache is head-major).
    head_len: usize,
    head_dim: usize,
    scale: f32,
}

/// A stored element type with its own compiled kernels (one dispatcher per type).
trait Attend: KvElem {
    #[allow(clippy::too_many_arguments)]
    fn attend_group(
        isa: Isa,
        q: &[f32],
        k: &[Self],
        v: &[Self],
        slots: &[u32],
        g: Geometry,
        scores: &mut Vec<f32>,
        out: &mut [f32],
    );
}

macro_rules! attend_for {
    ($($elem:ty => $dispatch:ident, $kernel:ident);* $(;)?) => {$(
        simd_dispatch! {
            #[allow(clippy::too_many_arguments)]
            fn $dispatch(q: &[f32], k: &[$elem], v: &[$elem], slots: &[u32], g: Geometry, scores: &mut Vec<f32>, out: &mut [f32]) => $kernel
        }
        #[inline(always)]
        #[allow(clippy::too_many_arguments)]
        fn $kernel<S: F32x16>(q: &[f32], k: &[$elem], v: &[$elem], slots: &[u32], g: Geometry, scores: &mut Vec<f32>, out: &mut [f32]) {
            attend_group_kernel::<S, $elem>(q, k, v, slots, g, scores, out)
        }
        impl Attend for $elem {
            fn attend_group(isa: Isa, q: &[f32], k: &[Self], v: &[Self], slots: &[u32], g: Geometry, scores: &mut Vec<f32>, out: &mut [f32]) {
                $dispatch(isa, q, k, v, slots, g, scores, out)
            }
        }
    )*};
}
attend_for! {
    f32 => attend_f32, attend_f32_kernel;
    F16 => attend_f16, attend_f16_kernel;
    Bf16 => attend_bf16, attend_bf16_kernel;
}

/// Query heads whose score chains run side by side, so one load of a K row feeds them all.
const SCORE_HEADS: usize = 4;
/// Accumulators the V sum keeps in registers (heads at once × head_dim / 16).
const V_ACCS: usize = 16;
/// Positions ahead whose K and V rows are prefetched.
const AHEAD: usize = 32;

/// The query heads in `q` ([heads, head_dim]) against one KV head: for each head, its scores
/// (each one 16-lane FMA chain over head_dim, then the `hsum` tree, taken sixteen positions at
/// a time by `hsum16`, same bits), softmax, and the V sum in position order. Heads run a few at
/// a time side by side — independent chains the CPU overlaps, reading each K and V row once for
/// all of them — which changes no head's own sequence of operations.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn attend_group_kernel<S: F32x16, E: KvElem>(
    q: &[f32],
    k: &[E],
    v: &[E],
    slots: &[u32],
    g: Geometry,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let head_dim = g.head_dim;
    let (ctx, num_q) = (slots.len(), q.len() / head_dim);
    let padded = ctx.div_ceil(LANES) * LANES;
    // [num_q, padded]; the padding scores are 0 as in a fresh buffer (the exp below reads them).
    scores.clear();
    scores.resize(num_q * padded, 0.0);
    let rows = Rows { slots, stride: head_dim, base: g.kv_head * g.head_len, head_dim, padded };
    let mut h0 = 0;
    while h0 < num_q {
        // A direct call per batch size so each keeps its chains in registers.
        let (qs, sc) = (&q[h0 * head_dim..], &mut scores[h0 * padded..]);
        h0 += match num_q - h0 {
            1 => score_heads::<S, E, 1>(qs, k, &rows, g.scale, sc),
            2 => score_heads::<S, E, 2>(qs, k, &rows, g.scale, sc),
            3 => score_heads::<S, E, 3>(qs, k, &rows, g.scale, sc),
            _ => score_heads::<S, E, SCORE_HEADS>(qs, k, &rows, g.scale, sc),
        };
    }
    let nv = head_dim / LANES;
    assert!(nv <= MAX_HEAD_DIM / LANES, "head_dim above {MAX_HEAD_DIM} is not supported");
    let batch = (V_ACCS / nv).clamp(1, V_ACCS);
    let mut h0 = 0;
    while h0 < num_q {
        let hb = (num_q - h0).min(batch);
        let mut inv = [0f32; V_ACCS];
        for (h, i) in inv.iter_mut().enumerate().take(hb) {
            *i = softmax::<S>(&mut scores[(h0 + h) * padded..][..padded], ctx);
        }
        let (sc, o) = (&scores[h0 * padded..], &mut out[h0 * head_dim..]);
        match (nv, hb) {
            (4, 1) => v_sum::<S, E, 4, 1>(sc, v, &rows, &inv, o),
            (4, 2) => v_sum::<S, E, 4, 2>(sc, v, &rows, &inv, o),
            (4, 3) => v_sum::<S, E, 4, 3>(sc, v, &rows, &inv, o),
            (4, 4) => v_sum::<S, E, 4, 4>(sc, v, &rows, &inv, o),
            (8, 1) => v_sum::<S, E, 8, 1>(sc, v, &rows, &inv, o),
            (8, 2) => v_sum::<S, E, 8, 2>(sc, v, &rows, &inv, o),
            (16, 1) => v_sum::<S, E, 16, 1>(sc, v, &rows, &inv, o),
            _ => {
                for h in 0..hb {
                    v_sum_one::<S, E>(&sc[h * padded..], v, &rows, inv[h], &mut o[h * head_dim..][..head_dim]);
                }
            }
        }
        h0 += hb;
    }
}

/// Where a KV head's rows sit: the slot of each position, the row stride, the head's offset.
struct Rows<'a> {
    slots: &'a [u32],
    stride: usize,
    base: usize,
    head_dim: usize,
    /// Scores per head, padded to whole chunks of sixteen.
    padded: usize,
}

impl Rows<'_> {
    #[inline(always)]
    fn of<'v, E>(&self, t: &'v [E], slot: u32) -> &'v [E] {
        &t[slot as usize * self.stride + self.base..][..self.head_dim]
    }
}

/// The scores of `H` query heads (`q` [H, head_dim], `scores` [H, padded]); returns `H`.
#[inline(always)]
fn score_heads<S: F32x16, E: KvElem, const H: usize>(
    q: &[f32],
    k: &[E],
    r: &Rows,
    scale: f32,
    scores: &mut [f32],
) -> usize {
    let (ctx, hd) = (r.slots.len(), r.head_dim);
    for c in (0..ctx).step_by(LANES) {
        let chunk = &r.slots[c..(c + LANES).min(ctx)];
        let next = &r.slots[(c + AHEAD).min(ctx)..(c + AHEAD + LANES).min(ctx)];
        let mut accs = [[S::zero(); LANES]; H];
        for (i, &slot) in chunk.iter().enumerate() {
            // The next chunk's rows (another block) are fetched while this one is computed.
            if let Some(&ahead) = next.get(i) {
                prefetch(r.of(k, ahead));
            }
            let kh = r.of(k, slot);
            // Local accumulators, stored once: through `accs` every FMA would wait on a
            // store-to-load round trip.
            let mut a = [S::zero(); H];
            for j in (0..hd).step_by(LANES) {
                let kv = E::vec::<S>(kh, j);
                for (h, a) in a.iter_mut().enumerate() {
                    *a = S::load(&q[h * hd + j..]).fma(kv, *a);
                }
            }
            for (acc, a) in accs.iter_mut().zip(a) {
                acc[i] = a;
            }
        }
        for (h, acc) in accs.iter().enumerate() {
            let mut dots = [0f32; LANES];
            S::hsum16(acc).mul(S::splat(scale)).store(&mut dots);
            scores[h * r.padded + c..][..chunk.len()].copy_from_slice(&dots[..chunk.len()]);
        }
    }
    H
}

/// Softmax numerators of one head in place (`scores[..ctx]`, the padding to whole chunks set to
/// 0): e^(s − max), summed in a fixed lane order over positions; returns 1 / the sum.
#[inline(always)]
fn softmax<S: F32x16>(scores: &mut [f32], ctx: usize) -> f32 {
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
    1.0 / sum.hsum()
}

/// out[h] = (Σ_p scores[h][p] · V[p]) · inv[h] for `H` heads (head_dim = 16 · NV), positions in
/// order, one FMA chain per output vector.
#[inline(always)]
fn v_sum<S: F32x16, E: KvElem, const NV: usize, const H: usize>(
    scores: &[f32],
    v: &[E],
    r: &Rows,
    inv: &[f32; V_ACCS],
    out: &mut [f32],
) {
    let mut acc = [[S::zero(); NV]; H];
    for (p, &slot) in r.slots.iter().enumerate() {
        if let Some(&ahead) = r.slots.get(p + AHEAD) {
            prefetch(r.of(v, ahead));
        }
        let vh = r.of(v, slot);
        let mut vv = [S::zero(); NV];
        for (i, x) in vv.iter_mut().enumerate() {
            *x = E::vec::<S>(vh, i * LANES);
        }
        for (h, acc_h) in acc.iter_mut().enumerate() {
            let pv = S::splat(scores[h * r.padded + p]);
            for (a, x) in acc_h.iter_mut().zip(&vv) {
                *a = pv.fma(*x, *a);
            }
        }
    }
    for (h, acc_h) in acc.iter().enumerate() {
        let inv_v = S::splat(inv[h]);
        for (i, a) in acc_h.iter().enumerate() {
            a.mul(inv_v).store(&mut out[h * r.head_dim + i * LANES..]);
        }
    }
}

/// `v_sum` for one head of any head_dim that is a multiple of 16.
#[inline(always)]
fn v_sum_one<S: F32x16, E: KvElem>(scores: &[f32], v: &[E], r: &Rows, inv: f32, out: &mut [f32]) {
    let mut acc = [S::zero(); MAX_HEAD_DIM / LANES];
    let nv = r.head_dim / LANES;
    for (p, &slot) in scores.iter().zip(r.slots.iter()) {
        let vh = r.of(v, slot);
        let pv = S::splat(*p);
        for (i, a) in acc.iter_mut().take(nv).enumerate() {
            *a = pv.fma(E::vec::<S>(vh, i * LANES), *a);
        }
    }
    let inv_v = S::splat(inv);
    for (i, a) in acc.iter().take(nv).enumerate() {
        a.mul(inv_v).store(&mut out[i * LANES..]);
    }
}
