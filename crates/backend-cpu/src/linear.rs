//! `linear`: out[n, m] = Σ_k x[n, k] · w[m, k] for any weight format.
//! Weights stay in their checkpoint format. Up to `FUSED_MAX_ROWS` rows (decode) multiply straight
//! from the quantized blocks (`fused`); more rows share a tile of weight rows expanded to f32
//! (`weights::row`), which amortizes the unpacking over up to 64 rows.
//! Batch invariance: every output element is one 16-lane f32 FMA chain over k (lane j takes
//! k ≡ j mod 16, in increasing k) followed by the fixed `hsum` tree. Tile sizes change which
//! elements are computed together, never an element's own sequence of operations; threads split
//! outputs, never the reduction.

use crate::pool::Pool;
use crate::q8::Q8Rows;
use crate::simd::{F32x16, Isa, LANES, simd_dispatch};
use crate::{CpuWeight, SharedOut, fused, q8, weights};
use plumb_core::GgmlType;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Weight rows dequantized together (one tile).
const TILE_M: usize = 8;
/// Activation rows whose tiles share one dequantized weight tile.
const ROW_BLOCK: usize = 64;

/// One product of a launch: out [num_rows, w.rows] = x [num_rows, w.cols] · wᵀ.
pub struct Product<'a> {
    pub x: &'a [f32],
    pub num_rows: usize,
    pub w: &'a CpuWeight,
    pub out: &'a mut [f32],
}

/// Every product in one pool launch: the outputs of all of them form one range of tiles that
/// threads take runs of. Products may share an input (q/k/v, gate/up) or each have their own
/// (the experts of a MoE layer); each output is computed exactly as it would be alone.
/// Weights repacked for Q8 activations (`CpuWeight::q8`) take the Q8 path at any row count, on
/// VNNI when `vnni` holds.
pub fn linear(pool: &Pool, isa: Isa, vnni: bool, products: &mut [Product]) {
    for p in products.iter() {
        assert_eq!(p.x.len(), p.num_rows * p.w.cols, "linear: x has the wrong size for `{}`", p.w.name);
        assert_eq!(p.out.len(), p.num_rows * p.w.rows, "linear: out has the wrong size for `{}`", p.w.name);
    }
    // The fused kernel reads the rows regrouped by block: packed here once for every thread,
    // and once per distinct input (`packed_of[i]`: product i's, or `None` when not fused).
    let mut packed: Vec<Vec<f32>> = Vec::new();
    let mut packed_of: Vec<Option<usize>> = Vec::with_capacity(products.len());
    // Likewise the Q8 path's quantized rows, once per distinct input and layout.
    let mut q8_rows: Vec<Q8Rows> = Vec::new();
    let mut q8_of: Vec<Option<usize>> = Vec::with_capacity(products.len());
    for (i, p) in products.iter().enumerate() {
        let Some(w8) = &p.w.q8 else {
            q8_of.push(None);
            continue;
        };
        let same = (0..i).find(|&j| {
            q8_of[j].is_some()
                && std::ptr::eq(products[j].x, p.x)
                && products[j].w.q8.as_ref().is_some_and(|o| o.data.layout == w8.data.layout)
        });
        q8_of.push(Some(same.and_then(|j| q8_of[j]).unwrap_or_else(|| {
            q8_rows.push(Q8Rows::pack(pool, isa, p.x, p.num_rows, p.w.cols, &w8.data.layout));
            q8_rows.len() - 1
        })));
    }
    for (i, p) in products.iter().enumerate() {
        if q8_of[i].is_some() || !((1..=FUSED_MAX_ROWS).contains(&p.num_rows) && has_fused(p.w.ty)) {
            packed_of.push(None);
            continue;
        }
        let same = (0..i).find(|&j| packed_of[j].is_some() && std::ptr::eq(products[j].x, p.x));
        packed_of.push(Some(same.and_then(|j| packed_of[j]).unwrap_or_else(|| {
            packed.push(fused::pack_rows(p.x, p.num_rows, p.w.cols, fused::group_rows_of(isa)));
            packed.len() - 1
        })));
    }
    let shared: Vec<SharedOut> = products.iter_mut().map(|p| SharedOut::new(p.out)).collect();
    let tiles: Vec<usize> = products.iter().map(|p| p.w.rows.div_ceil(TILE_M)).collect();
    let total: usize = tiles.iter().sum();
    let products: &[Product] = products;
    // Threads take runs of tiles from a shared counter rather than fixed shares, so a thread
    // that the machine slows down (another tenant, an interrupt) leaves its work to the others.
    // Which thread computes a tile changes none of its arithmetic.
    let next = AtomicUsize::new(0);
    pool.run(&|_, nt| {
        let grab = (total / (nt * GRABS_PER_THREAD)).max(1);
        loop {
            let start = next.fetch_add(grab, Ordering::Relaxed);
            if start >= total {
                break;
            }
            let mine = start..(start + grab).min(total);
            let mut first = 0;
            for (i, p) in products.iter().enumerate() {
                let (lo, hi) = (mine.start.max(first), mine.end.min(first + tiles[i]));
                if lo < hi {
                    let (m_start, m_end) = ((lo - first) * TILE_M, ((hi - first) * TILE_M).min(p.w.rows));
                    // Each run of tiles is one thread's, so threads own disjoint column ranges
                    // m_start..m_end of every row; the kernels borrow only those elements (see
                    // `SharedOut::part`).
                    if let (Some(j), Some(w8)) = (q8_of[i], &p.w.q8) {
                        q8::part(vnni, isa, &q8_rows[j], p.num_rows, w8, p.w.rows, (m_start, m_end), shared[i]);
                    } else {
                        let packed = packed_of[i].map_or(&[][..], |j| &packed[j]);
                        let part = Part { x: p.x, packed, num_rows: p.num_rows, w: p.w };
                        linear_part(isa, &part, m_start, m_end, shared[i]);
                    }
                }
                first += tiles[i];
            }
        }
    });
}

/// One product as a thread's kernel sees it: the input as given and as `fused::pack_rows`
/// regroups it (empty when the fused kernel does not apply).
struct Part<'a> {
    x: &'a [f32],
    packed: &'a [f32],
    num_rows: usize,
    w: &'a CpuWeight,
}

/// Runs of tiles per thread and launch: enough for a slowed thread's work to move to the others,
/// few enough that each run is long for the prefetcher.
const GRABS_PER_THREAD: usize = 8;

/// Whether `linear` has a fused kernel for weights of `ty`.
fn has_fused(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 | GgmlType::Q4_K | GgmlType::Q6_K)
}

simd_dispatch! {
    fn linear_part(part: &Part, m_start: usize, m_end: usize, out: SharedOut) => linear_part_kernel
}

/// Columns `m_start..m_end` of `out` = x · wᵀ.
#[inline(always)]
fn linear_part_kernel<S: F32x16>(part: &Part, m_start: usize, m_end: usize, out: SharedOut) {
    let Part { x, packed, num_rows, w } = *part;
    if num_rows <= FUSED_MAX_ROWS {
        // A direct call per format (not a function pointer) so each inlines into this
        // `#[target_feature]` instantiation.
        let at = fused::Out { out: &out, m: w.rows, m0: 0 };
        match w.ty {
            GgmlType::Q4_0 => return fused_part::<S, weights::Q4_0>(packed, num_rows, w, m_start, m_end, at),
            GgmlType::Q4_1 => return fused_part::<S, weights::Q4_1>(packed, num_rows, w, m_start, m_end, at),
            GgmlType::Q8_0 => return fused_part::<S, weights::Q8_0>(packed, num_rows, w, m_start, m_end, at),
            GgmlType::Q4_K => return fused_part::<S, weights::Q4K>(packed, num_rows, w, m_start, m_end, at),
            GgmlType::Q6_K => return fused_part::<S, weights::Q6K>(packed, num_rows, w, m_start, m_end, at),
            _ => {}
        }
    }
    let (m, k) = (w.rows, w.cols);
    let mut tile = vec![0f32; TILE_M * k];
    for rb in (0..num_rows).step_by(ROW_BLOCK) {
        let rb_end = (rb + ROW_BLOCK).min(num_rows);
        for m0 in (m_start..m_end).step_by(TILE_M) {
            let c = TILE_M.min(m_end - m0);
            expand_tile::<S>(w, m0, c, &mut tile);
            let mut r0 = rb;
            while r0 < rb_end {
                let r = (rb_end - r0).min(4);
                match (r, c) {
                    (4, 8) if !S::ONE_REGISTER => {
                        for half in 0..2 {
                            micro::<S, 2, 2>(x, r0 + 2 * half, &tile, 0, k, &out, m, m0);
                            micro::<S, 2, 2>(x, r0 + 2 * half, &tile, 2, k, &out, m, m0);
                            micro::<S, 2, 2>(x, r0 + 2 * half, &tile, 4, k, &out, m, m0);
                            micro::<S, 2, 2>(x, r0 + 2 * half, &tile, 6, k, &out, m, m0);
                        }
                    }
                    (4, 8) => {
                        micro::<S, 4, 4>(x, r0, &tile, 0, k, &out, m, m0);
                        micro::<S, 4, 4>(x, r0, &tile, 4, k, &out, m, m0);
                    }
                    (r, c) => {
                        for ri in 0..r {
                            let mut c0 = 0;
                            while c0 < c {
                                if c - c0 >= 8 {
                                    micro::<S, 1, 8>(x, r0 + ri, &tile, c0, k, &out, m, m0);
                                    c0 += 8;
                                } else {
                                    micro::<S, 1, 1>(x, r0 + ri, &tile, c0, k, &out, m, m0);
                                    c0 += 1;
                                }
                            }
                        }
                    }
                }
                r0 += r;
            }
        }
    }
}

/// Columns `m_start..m_end` of every row straight from the quantized blocks, a tile at a time.
#[inline(always)]
fn fused_part<S: F32x16, F: weights::Fused>(
    packed: &[f32],
    num_rows: usize,
    w: &CpuWeight,
    m_start: usize,
    m_end: usize,
    mut at: fused::Out,
) {
    let (bytes, row_bytes): (&[u8], usize) = (&w.bytes, w.row_bytes);
    for m0 in (m_start..m_end).step_by(TILE_M) {
        // Decode streams weights from memory once: ask for a later tile while this one is
        // computed (rows are short, so the hardware prefetcher ramps up too late).
        let ahead = m0 + PREFETCH_TILES * TILE_M;
        let next = if ahead + TILE_M <= m_end { &bytes[ahead * row_bytes..(ahead + TILE_M) * row_bytes] } else { &[] };
        let c = TILE_M.min(m_end - m0);
        at.m0 = m0;
        fused::fused_tile::<S, F>(packed, num_rows, w.cols, &bytes[m0 * row_bytes..], row_bytes, c, next, &at);
    }
}

/// Tiles ahead that decode prefetches (measured: 2 gives +5–15% tg128 over none; 4 and 8 less).
const PREFETCH_TILES: usize = 2;

/// Hints the CPU to bring `data` into cache, a 64-byte line at a time.
#[inline(always)]
pub(crate) fn prefetch<T>(data: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        let start = data.as_ptr().cast::<u8>();
        for at in (0..std::mem::size_of_val(data)).step_by(64) {
            // SAFETY: `at` is inside `data`, so the offset stays in its allocation; prefetching
            // is a hint that never faults; SSE is part of the x86_64 baseline.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(start.add(at).cast()) };
        }
    }
}

/// Rows up to which `linear` multiplies straight from quantized blocks.
const FUSED_MAX_ROWS: usize = 16;

/// Expands weight rows `m0..m0 + c` into `tile` ([c, k] f32).
#[inline(always)]
fn expand_tile<S: F32x16>(w: &CpuWeight, m0: usize, c: usize, tile: &mut [f32]) {
    let k = w.cols;
    for ci in 0..c {
        let (src, dst) = (w.row_bytes(m0 + ci), &mut tile[ci * k..(ci + 1) * k]);
        match w.ty {
            GgmlType::Q4_0 => weights::row::<S, weights::Q4_0>(src, dst),
            GgmlType::Q4_1 => weights::row::<S, weights::Q4_1>(src, dst),
            GgmlType::Q8_0 => weights::row::<S, weights::Q8_0>(src, dst),
            GgmlType::Q4_K => weights::row_fused::<S, weights::Q4K>(src, dst),
            GgmlType::Q6_K => weights::row_fused::<S, weights::Q6K>(src, dst),
            _ => crate::dequant::dequant_row_kernel::<S>(w.ty, src, dst),
        }
    }
}

/// R activation rows from `r0` × C expanded weight rows from tile row `c0`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn micro<S: F32x16, const R: usize, const C: usize>(
    x: &[f32],
    r0: usize,
    tile: &[f32],
    c0: usize,
    k: usize,
    out: &SharedOut,
    m: usize,
    m0: usize,
) {
    // Rows as arrays of 16-lane chunks of one length, checked once, so the loop below indexes
    // them without a bounds check per load (those checks otherwise take issue slots from the FMAs).
    assert!(k.is_multiple_of(LANES), "linear: K = {k} is not a multiple of {LANES}");
    let n = k / LANES;
    let mut xr: [&[[f32; LANES]]; R] = [&[]; R];
    for (r, row) in xr.iter_mut().enumerate() {
        *row = x[(r0 + r) * k..(r0 + r + 1) * k].as_chunks::<LANES>().0;
        assert_eq!(row.len(), n);
    }
    let mut wr: [&[[f32; LANES]]; C] = [&[]; C];
    for (c, row) in wr.iter_mut().enumerate() {
        *row = tile[(c0 + c) * k..(c0 + c + 1) * k].as_chunks::<LANES>().0;
        assert_eq!(row.len(), n);
    }
    let mut acc = [[S::zero(); C]; R];
    for i in 0..n {
        let mut wv = [S::zero(); C];
        for (v, row) in wv.iter_mut().zip(&wr) {
            *v = S::load(&row[i]);
        }
        for (acc_r, row) in acc.iter_mut().zip(&xr) {
            let xv = S::load(&row[i]);
            for (a, wc) in acc_r.iter_mut().zip(&wv) {
                *a = xv.fma(*wc, *a);
            }
        }
    }
    for (r, dots) in fused::hsums(&acc).iter().enumerate() {
        // SAFETY: columns m0 + c0 .. m0 + c0 + C belong to this thread (see `linear`).
        unsafe { out.part((r0 + r) * m + m0 + c0, C) }.copy_from_slice(dots);
    }
}
