//! Conformance cases of the optional mixture-of-experts op group, run where the backend under
//! test has it (`Backend::moe_ops`). Router scores carry exact ties at the top and at the k-th
//! place, so the tie rule (lower expert index first) is checked, not just the ordering.

use super::{CaseResult, Pair};
use crate::bounds::{Metric, bound, combine_bound};
use crate::inputs::{Rng, Spread, activations};
use plumb_core::{Backend, ExpertRow, FullBackend, MoeOps};

pub(super) fn moe_cases<B: FullBackend>(p: &Pair<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    let Some(ops) = p.b.moe_ops() else { return };
    router_cases(p, ops, rng, out);
    combine_cases(p, ops, rng, out);
}

type Ops<'a, B> =
    &'a dyn MoeOps<Tensor = <B as Backend>::Tensor, Weight = <B as Backend>::Weight, KvCache = <B as Backend>::KvCache>;

fn router_cases<B: FullBackend>(p: &Pair<'_, B>, ops: Ops<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    for (rows, experts, k, renormalize) in [(1, 128, 8, true), (9, 8, 2, false), (6, 64, 4, true), (5, 60, 6, false)] {
        let mut logits: Vec<f32> = activations(rng, rows, experts, Spread::Normal).iter().map(|v| v * 2.0).collect();
        for r in 0..rows {
            let row = &mut logits[r * experts..(r + 1) * experts];
            // Ties for first place, and a tie with the row's k-th best score.
            let top = row.iter().copied().fold(f32::MIN, f32::max);
            let (a, b) = (rng.below(experts), rng.below(experts));
            row[a] = top;
            row[b] = top;
            let mut sorted = row.to_vec();
            sorted.sort_by(|x, y| y.total_cmp(x));
            let kth = sorted[k - 1];
            let c = rng.below(experts);
            row[c] = kth;
        }
        let mut got_w = p.poisoned(rows, k);
        let got_ids = ops.router_topk(&p.b.upload(&logits, rows, experts), k, renormalize, &mut got_w);
        let mut want_w = p.r.tensor(rows, k);
        let want_ids = p.r.router_topk(&p.r.upload(&logits, rows, experts), k, renormalize, &mut want_w);
        let variant = format!("{rows}x{experts} top-{k}{}", if renormalize { " renormalized" } else { "" });
        let differ =
            got_ids.len().abs_diff(want_ids.len()) + got_ids.iter().zip(&want_ids).filter(|(a, b)| a != b).count();
        out.push(CaseResult::new(
            "router_topk",
            format!("ids {variant}, with ties"),
            Metric::Exact,
            differ as f64,
            0.0,
            got_ids.len() == rows * k,
        ));
        let (g, w, written) = p.compare(&got_w, &want_w);
        let b = bound("router_topk");
        out.push(CaseResult::new(
            "router_topk",
            format!("weights {variant}"),
            b.metric,
            crate::nrms(&g, &w),
            b.bound,
            written,
        ));
    }
}

fn combine_cases<B: FullBackend>(p: &Pair<'_, B>, ops: Ops<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    for (rows, k, cols, group_rows) in [(6, 2, 100, vec![4, 1, 7]), (3, 8, 64, vec![3, 3, 3, 3, 3, 3, 3, 3, 2])] {
        let ys: Vec<Vec<f32>> = group_rows.iter().map(|&n| activations(rng, n, cols, Spread::DynamicRange)).collect();
        let src: Vec<ExpertRow> = (0..rows * k)
            .map(|_| {
                let group = rng.below(group_rows.len());
                ExpertRow { group: group as u32, row: rng.below(group_rows[group]) as u32 }
            })
            .collect();
        let weights: Vec<f32> = (0..rows * k).map(|_| rng.uniform() as f32).collect();
        let ys_b: Vec<B::Tensor> = ys.iter().zip(&group_rows).map(|(y, &n)| p.b.upload(y, n, cols)).collect();
        let ys_r: Vec<_> = ys.iter().zip(&group_rows).map(|(y, &n)| p.r.upload(y, n, cols)).collect();
        let mut got = p.poisoned(rows, cols);
        ops.moe_combine(&ys_b.iter().collect::<Vec<_>>(), &src, &p.b.upload(&weights, rows, k), &mut got);
        let mut want = p.r.tensor(rows, cols);
        p.r.moe_combine(&ys_r.iter().collect::<Vec<_>>(), &src, &p.r.upload(&weights, rows, k), &mut want);
        let (g, w, written) = p.compare(&got, &want);
        // Backward error of each k-term sum: |got − want| / Σ_j |w_j · y_j|.
        let mut worst = 0f64;
        for n in 0..rows {
            for c in 0..cols {
                let scale: f64 = (0..k)
                    .map(|j| {
                        let s = src[n * k + j];
                        (weights[n * k + j] as f64 * ys[s.group as usize][s.row as usize * cols + c] as f64).abs()
                    })
                    .sum();
                let e = (g[n * cols + c] - w[n * cols + c]).abs() / scale.max(f64::MIN_POSITIVE);
                worst = worst.max(if e.is_nan() { f64::INFINITY } else { e });
            }
        }
        out.push(CaseResult::new(
            "moe_combine",
            format!("{rows} rows x top-{k} of {} groups, {cols} cols", group_rows.len()),
            Metric::DotBackward,
            worst,
            combine_bound(k),
            written,
        ));
    }
}
