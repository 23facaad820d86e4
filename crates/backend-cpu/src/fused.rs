//! The decode-side `linear` kernel: a few activation rows multiplied straight from quantized
//! blocks. Each 32-weight block is dequantized once into registers (`weights::Fused`; K-quant
//! super-blocks decode their scales once per 256 weights and unpack the sub-blocks that share
//! bytes together) and then
//! multiplied into the accumulators of every row of a group (up to `GROUP` rows × a few weight
//! rows held in registers, like a GEMM micro-kernel whose B operand is unpacked on the fly), so
//! adding rows adds FMAs, not unpacking or weight traffic.
//! Invariant: each output element gets the chain `linear` documents — one 16-lane accumulator,
//! blocks in increasing k, in each block lanes 0–15 then 16–31, one FMA each, then `hsum` — the
//! same whatever the group size, the element's place in it or the columns computed beside it.

use crate::SharedOut;
use crate::simd::F32x16;
use crate::weights::Fused;

/// Activation rows that share one dequantized block: eight where a vector takes one register
/// (AVX-512's 32 registers hold eight rows' accumulators of a column), four on AVX2, whose
/// sixteen registers hold half as many vectors (`group_rows`).
pub(crate) const GROUP: usize = 8;
const GROUP_TWO_REGISTERS: usize = 4;

/// The rows of a group for kernels of `S` (`pack_rows` must be given the same).
#[inline(always)]
pub(crate) const fn group_rows<S: F32x16>() -> usize {
    if S::ONE_REGISTER { GROUP } else { GROUP_TWO_REGISTERS }
}

/// `group_rows` of the kernels `isa` runs.
pub(crate) fn group_rows_of(isa: crate::simd::Isa) -> usize {
    if isa.kind() == crate::simd::IsaKind::Avx2 { GROUP_TWO_REGISTERS } else { GROUP }
}

/// The weight block length every fused format has.
const BLOCK: usize = 32;

/// `x` [num_rows, k] regrouped for the kernel: rows in groups of `group` (`group_rows`; the last
/// may be shorter), each group [k / 32, rows in group, 32], so one block of every row of a group
/// is contiguous. A copy, so the values (and the results) are unchanged.
pub(crate) fn pack_rows(x: &[f32], num_rows: usize, k: usize, group: usize) -> Vec<f32> {
    assert!(k.is_multiple_of(BLOCK) && x.len() == num_rows * k, "pack_rows: x is not [{num_rows}, {k}] in blocks");
    let mut packed = Vec::with_capacity(x.len());
    for r0 in (0..num_rows).step_by(group) {
        let rows = &x[r0 * k..(r0 + group).min(num_rows) * k];
        for blk in 0..k / BLOCK {
            for row in rows.chunks_exact(k) {
                packed.extend_from_slice(&row[blk * BLOCK..(blk + 1) * BLOCK]);
            }
        }
    }
    packed
}

/// Where results go: `out` is [_, m], and columns `m0..` of it belong to the caller's thread.
pub(crate) struct Out<'a> {
    pub out: &'a SharedOut,
    pub m: usize,
    pub m0: usize,
}

/// out[r, m0 + c] for every row r in `0..num_rows` and c in `0..num_cols`, from the `num_cols`
/// weight rows that start at `w` (`row_bytes` each); `xp` is the [num_rows, k] activation packed
/// by `pack_rows`. While the first group runs, `next` (the weights computed after these, or
/// nothing) is prefetched a column group at a time, which spreads the requests over the work.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn fused_tile<S: F32x16, F: Fused>(
    xp: &[f32],
    num_rows: usize,
    k: usize,
    w: &[u8],
    row_bytes: usize,
    num_cols: usize,
    next: &[u8],
    at: &Out,
) {
    let mut r0 = 0;
    while r0 < num_rows {
        let r = (num_rows - r0).min(group_rows::<S>());
        let (xs, _) = xp[r0 * k..(r0 + r) * k].as_chunks::<BLOCK>();
        let g = Group { w, row_bytes, num_cols, next: if r0 == 0 { next } else { &[] }, r0 };
        // A direct call per group size so each instantiation keeps its accumulators in registers.
        // With a register a vector: four columns up to four rows (at one row, eight columns
        // spilled their block pointers: 10-15% slower on Q4_1, Q4_K and Q6_K), two for more.
        // With two (AVX2): groups of four rows, two columns up to two rows, one for more (four
        // columns at one row, or two from four rows, spilled: the Q4_1 layers of a step at 1 / 4 /
        // 8 rows took 10.0 / 22.1 / 37.3 ms in the shapes above against 7.6 / 11.9 / 22.1, eight
        // rows as two groups; `cargo bench --bench linear`).
        if !S::ONE_REGISTER {
            match r {
                1 => columns::<S, F, 1, 2>(xs, &g, at),
                2 => columns::<S, F, 2, 2>(xs, &g, at),
                3 => columns::<S, F, 3, 1>(xs, &g, at),
                _ => columns::<S, F, 4, 1>(xs, &g, at),
            }
            r0 += r;
            continue;
        }
        match r {
            1 => columns::<S, F, 1, 4>(xs, &g, at),
            2 => columns::<S, F, 2, 4>(xs, &g, at),
            3 => columns::<S, F, 3, 4>(xs, &g, at),
            4 => columns::<S, F, 4, 4>(xs, &g, at),
            5 => columns::<S, F, 5, 2>(xs, &g, at),
            6 => columns::<S, F, 6, 2>(xs, &g, at),
            7 => columns::<S, F, 7, 2>(xs, &g, at),
            _ => columns::<S, F, 8, 2>(xs, &g, at),
        }
        r0 += r;
    }
}

/// One group of rows against the tile's weight rows.
struct Group<'a> {
    w: &'a [u8],
    row_bytes: usize,
    num_cols: usize,
    next: &'a [u8],
    r0: usize,
}

/// R rows × all the tile's columns, C columns at a time (then one at a time for the rest).
#[inline(always)]
fn columns<S: F32x16, F: Fused, const R: usize, const C: usize>(xs: &[[f32; BLOCK]], g: &Group, at: &Out) {
    let (xs, _) = xs.as_chunks::<R>();
    let mut c0 = 0;
    while c0 < g.num_cols {
        let c = if g.num_cols - c0 >= C { C } else { 1 };
        if !g.next.is_empty() {
            crate::linear::prefetch(&g.next[c0 * g.row_bytes..(c0 + c) * g.row_bytes]);
        }
        let w = &g.w[c0 * g.row_bytes..(c0 + c) * g.row_bytes];
        if c == C {
            store(at, g.r0, c0, &micro::<S, F, R, C>(xs, w, g.row_bytes));
        } else {
            store(at, g.r0, c0, &micro::<S, F, R, 1>(xs, w, g.row_bytes));
        }
        c0 += c;
    }
}

#[inline(always)]
fn store<const R: usize, const C: usize>(at: &Out, r0: usize, c0: usize, dots: &[[f32; C]; R]) {
    for (r, row) in dots.iter().enumerate() {
        // SAFETY: columns m0 .. m0 + num_cols of every row belong to this thread (see `linear`),
        // and c0 + C <= num_cols.
        unsafe { at.out.part((r0 + r) * at.m + at.m0 + c0, C) }.copy_from_slice(row);
    }
}

/// Σ_k x[r, k] · w_c[k] for the R rows of `xs` ([k / 32] blocks of [R, 32]) and the C weight
/// rows of `w` (`row_bytes` each), a super-block of `F::SUBS` blocks at a time.
#[inline(always)]
fn micro<S: F32x16, F: Fused, const R: usize, const C: usize>(
    xs: &[[[f32; BLOCK]; R]],
    w: &[u8],
    row_bytes: usize,
) -> [[f32; C]; R] {
    let cols: [&[u8]; C] = std::array::from_fn(|c| &w[c * row_bytes..(c + 1) * row_bytes]);
    let mut acc = [[S::zero(); C]; R];
    for (sb, xsb) in xs.chunks_exact(F::SUBS).enumerate() {
        let mut blocks: [&[u8]; C] = [&[]; C];
        let mut heads = [F::Header::default(); C];
        for c in 0..C {
            blocks[c] = &cols[c][sb * F::BYTES..(sb + 1) * F::BYTES];
            heads[c] = F::header::<S>(blocks[c]);
        }
        if F::GROUP == 1 {
            // One block per group: every column's weights first, then each row's activations
            // loaded once for all columns (half the loads of the column-major order below).
            for (g, xb) in xsb.iter().enumerate() {
                let mut wv = [[S::zero(); 8]; C];
                for c in 0..C {
                    F::group::<S>(blocks[c], &heads[c], g, &mut wv[c]);
                }
                for (acc_r, x) in acc.iter_mut().zip(xb) {
                    let (lo, hi) = (S::load(x), S::load(&x[16..]));
                    for c in 0..C {
                        acc_r[c] = hi.fma(wv[c][1], lo.fma(wv[c][0], acc_r[c]));
                    }
                }
            }
            continue;
        }
        for (g, xg) in xsb.chunks_exact(F::GROUP).enumerate() {
            for c in 0..C {
                let mut wv = [S::zero(); 8];
                F::group::<S>(blocks[c], &heads[c], g, &mut wv);
                for (s, xb) in xg.iter().enumerate() {
                    for (acc_r, x) in acc.iter_mut().zip(xb) {
                        acc_r[c] = S::load(&x[16..]).fma(wv[2 * s + 1], S::load(x).fma(wv[2 * s], acc_r[c]));
                    }
                }
            }
        }
    }
    hsums(&acc)
}

/// `hsum` of every accumulator; sixteen at a time (`F32x16::hsum16`, same bits) when there are
/// enough to fill most of a batch.
#[inline(always)]
pub(crate) fn hsums<S: F32x16, const R: usize, const C: usize>(acc: &[[S; C]; R]) -> [[f32; C]; R] {
    // Loops, not `map` with a closure: a closure would be compiled without the caller's target
    // features and the intrinsics inside `hsum` would not inline.
    let mut dots = [[0f32; C]; R];
    if (8..=16).contains(&(R * C)) {
        let mut v = [S::zero(); 16];
        for r in 0..R {
            for c in 0..C {
                v[r * C + c] = acc[r][c];
            }
        }
        let mut lanes = [0f32; 16];
        S::hsum16(&v).store(&mut lanes);
        for r in 0..R {
            for c in 0..C {
                dots[r][c] = lanes[r * C + c];
            }
        }
    } else {
        for r in 0..R {
            for c in 0..C {
                dots[r][c] = acc[r][c].hsum();
            }
        }
    }
    dots
}
