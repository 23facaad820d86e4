//! Clusters of two CTAs sharing x by TMA multicast (the `_c2` instances, on by default at prefill
//! rows: `set_tma_cluster_prefill`) give the bits of one CTA each, for plain products and for
//! gate|up with the SwiGLU, at one and at several row tiles of 128 and 192 rows, and where a
//! weight's last feature tile is single (the second CTA of its pair idle). Small enough for the
//! CPU emulator, which models clusters (tools/cuda-emu: a cluster's blocks run together, each
//! with its own shared memory), so CI runs the default prefill path's kernels too. So do the
//! decode rows' K split over clusters of two and four CTAs (`set_tma_ksplit`: rank 0 folds the
//! others' chunk sums, handed over by st.async; or where `tma::ks_auto` picks it), and the same
//! split on 64-feature tasks at 17 to 64 rows (`set_tma_ksplit_narrow`), against the split folds
//! through global memory and whole K a block.

#[path = "support/device.rs"]
mod device;
#[path = "support/rows.rs"]
mod rows;

use rows::{assert_same_bits, on_tma, weight};

use plumb_core::{Backend, GgmlType, LinearOps};
use plumb_verify::inputs::{Rng, Spread, activations};

#[test]
fn prefill_products_in_clusters_of_two_give_the_bits_of_one_cta_each() {
    let Some(b) = device::backend("linear") else { return };
    if !on_tma(&b) {
        return;
    }
    let mut rng = Rng::new(device::seed());
    let before = b.tma_cluster_launches();
    // 200 features: two tiles of 128, the second partial; 384: three, the last one's pair idle.
    for (n, k) in [(200, 1280), (384, 576)] {
        let w = weight(&b, &mut rng, GgmlType::BF16, n, k);
        for m in [130, 300] {
            let x = b.upload(&activations(&mut rng, m, k, Spread::DynamicRange), m, k);
            let run = |clusters: bool| {
                b.set_tma_cluster_prefill(clusters);
                let mut out = b.tensor(m, n);
                b.linear(&x, &w, &mut out);
                b.download(&out)
            };
            let alone = run(false);
            assert!(alone.iter().all(|v| v.is_finite()), "{n}x{k}, {m} rows: non-finite output");
            assert_same_bits(&run(true), &alone, &|| {
                format!("linear BF16 {n}x{k}, {m} rows, in clusters against alone")
            });
        }
    }
    // gate|up with the SwiGLU, gate's and up's rows interleaved (`_gli_c2`): 12 pairs of 64-feature
    // tiles, six a CTA of each cluster.
    let (gate, up) = (weight(&b, &mut rng, GgmlType::BF16, 768, 576), weight(&b, &mut rng, GgmlType::BF16, 768, 576));
    for m in [130, 300] {
        let x = b.upload(&activations(&mut rng, m, 576, Spread::DynamicRange), m, 576);
        let run = |clusters: bool| {
            b.set_tma_cluster_prefill(clusters);
            let mut out = b.tensor(m, 768);
            b.linear_swiglu(&x, &gate, &up, &mut out);
            b.download(&out)
        };
        let alone = run(false);
        assert!(alone.iter().all(|v| v.is_finite()), "swiglu, {m} rows: non-finite output");
        assert_same_bits(&run(true), &alone, &|| format!("swiglu 768x576, {m} rows, in clusters against alone"));
    }
    b.set_tma_cluster_prefill(true);
    assert!(b.tma_cluster_launches() > before, "no launch ran in clusters");
}

#[test]
fn decode_products_split_over_a_cluster_give_the_bits_of_the_global_fold() {
    let Some(b) = device::backend("linear") else { return };
    if !on_tma(&b) {
        return;
    }
    let mut rng = Rng::new(device::seed());
    let (before, was) = (b.tma_ks_launches(), b.tma_ksplit());
    // K of 4 chunks of 1,024; of 5 and 10 chunks of 256 (a last round short of senders). 200
    // features: two tiles, the second partial.
    for (n, k) in [(200, 4096), (200, 1280), (136, 2560)] {
        let w = weight(&b, &mut rng, GgmlType::BF16, n, k);
        for m in [1, 3, 13, 32, 64] {
            let x = b.upload(&activations(&mut rng, m, k, Spread::DynamicRange), m, k);
            let run = |ks: usize| {
                b.set_tma_ksplit(Some(ks));
                let mut out = b.tensor(m, n);
                b.linear(&x, &w, &mut out);
                b.set_tma_ksplit(was);
                b.download(&out)
            };
            let global = run(0);
            assert!(global.iter().all(|v| v.is_finite()), "{n}x{k}, {m} rows: non-finite output");
            for ks in [2, 4] {
                assert_same_bits(&run(ks), &global, &|| {
                    format!("linear BF16 {n}x{k}, {m} rows, K split over {ks} CTAs against the global fold")
                });
            }
        }
    }
    // gate|up with the SwiGLU (`_glu_s2`, `_glu_s4`): rank 0 folds gate's and up's sums, then
    // the exchange.
    let (gate, up) = (weight(&b, &mut rng, GgmlType::BF16, 192, 1280), weight(&b, &mut rng, GgmlType::BF16, 192, 1280));
    for m in [1, 8, 64] {
        let x = b.upload(&activations(&mut rng, m, 1280, Spread::DynamicRange), m, 1280);
        let run = |ks: usize| {
            b.set_tma_ksplit(Some(ks));
            let mut out = b.tensor(m, 192);
            b.linear_swiglu(&x, &gate, &up, &mut out);
            b.set_tma_ksplit(was);
            b.download(&out)
        };
        let global = run(0);
        assert!(global.iter().all(|v| v.is_finite()), "swiglu, {m} rows: non-finite output");
        for ks in [2, 4] {
            assert_same_bits(&run(ks), &global, &|| format!("swiglu 192x1280, {m} rows, K split over {ks} CTAs"));
        }
    }
    assert!(b.tma_ks_launches() > before, "no launch split K over a cluster");
    // The backend's own pick (`tma::ks_auto`, `PLUMB_CUDA_TMA_KSPLIT=auto`): plain products at
    // 5 to 32 rows whose split would fold in a launch, the bits again.
    let w = weight(&b, &mut rng, GgmlType::BF16, 200, 1280);
    for m in [3, 8, 16, 32] {
        let x = b.upload(&activations(&mut rng, m, 1280, Spread::DynamicRange), m, 1280);
        let run = |ks: Option<usize>| {
            b.set_tma_ksplit(ks);
            let mut out = b.tensor(m, 200);
            b.linear(&x, &w, &mut out);
            b.set_tma_ksplit(was);
            b.download(&out)
        };
        let (off, at) = (run(Some(0)), b.tma_ks_launches());
        assert_same_bits(&run(None), &off, &|| format!("linear 200x1280, {m} rows, the backend's K split"));
        // Past 4 rows the split would fold in a launch; at 32 this K of 5 chunks runs whole.
        let picked = (5..=16).contains(&m);
        assert_eq!(b.tma_ks_launches() > at, picked, "{m} rows: the backend's pick of a K split over a cluster");
    }
}

#[test]
fn products_of_17_to_64_rows_split_over_a_cluster_on_64_feature_tasks_give_the_bits_of_main() {
    let Some(b) = device::backend("linear") else { return };
    if !on_tma(&b) {
        return;
    }
    let mut rng = Rng::new(device::seed());
    let (before, was) = (b.tma_ks_launches(), b.tma_ksplit_narrow());
    // K of 4 chunks of 1,024 (whole K a block at 32 and more rows), 5 of 256 (a last round short
    // of senders) and 14 of 1,024 (down's: split with a fold launch at these rows). 200 features:
    // four 64-feature tiles, the last partial.
    for (n, k) in [(200, 4096), (200, 1280), (72, 14336)] {
        let w = weight(&b, &mut rng, GgmlType::BF16, n, k);
        for m in [17, 32, 40, 64] {
            let x = b.upload(&activations(&mut rng, m, k, Spread::DynamicRange), m, k);
            let run = |ks: usize| {
                b.set_tma_ksplit_narrow(ks);
                let mut out = b.tensor(m, n);
                b.linear(&x, &w, &mut out);
                b.set_tma_ksplit_narrow(was);
                b.download(&out)
            };
            let main = run(0);
            assert!(main.iter().all(|v| v.is_finite()), "{n}x{k}, {m} rows: non-finite output");
            for ks in [2, 4] {
                let at = b.tma_ks_launches();
                assert_same_bits(&run(ks), &main, &|| {
                    format!("linear BF16 {n}x{k}, {m} rows, K split over {ks} CTAs on 64-feature tasks")
                });
                assert!(b.tma_ks_launches() > at, "{n}x{k}, {m} rows: no launch split K over {ks} CTAs");
            }
        }
    }
    // Three weights of one input in one launch (q|k|v), each on whole tiles of its own.
    let ws: Vec<_> = [136, 64, 64].iter().map(|&n| weight(&b, &mut rng, GgmlType::BF16, n, 2048)).collect();
    for m in [24, 64] {
        let x = b.upload(&activations(&mut rng, m, 2048, Spread::DynamicRange), m, 2048);
        let run = |ks: usize| {
            b.set_tma_ksplit_narrow(ks);
            let mut outs: Vec<_> = ws.iter().map(|w| b.tensor(m, w.rows)).collect();
            let mut refs: Vec<_> = outs.iter_mut().collect();
            b.linear_multi(&x, &ws.iter().collect::<Vec<_>>(), &mut refs);
            b.set_tma_ksplit_narrow(was);
            outs.iter().flat_map(|o| b.download(o)).collect::<Vec<f32>>()
        };
        let main = run(0);
        for ks in [2, 4] {
            assert_same_bits(&run(ks), &main, &|| format!("q|k|v of 2048, {m} rows, narrow K split over {ks}"));
        }
    }
    // Not at 16 rows or fewer, where the 128-feature split stays the backend's.
    let w = weight(&b, &mut rng, GgmlType::BF16, 200, 4096);
    let x = b.upload(&activations(&mut rng, 16, 4096, Spread::DynamicRange), 16, 4096);
    b.set_tma_ksplit_narrow(2);
    let at = b.tma_ks_launches();
    let mut out = b.tensor(16, 200);
    b.linear(&x, &w, &mut out);
    b.set_tma_ksplit_narrow(was);
    assert_eq!(b.tma_ks_launches(), at, "16 rows split K on 64-feature tasks");
    assert!(b.tma_ks_launches() > before);
}
