//! Clusters of two CTAs sharing x by TMA multicast (the `_c2` instances, on by default at prefill
//! rows: `set_tma_cluster_prefill`), and of four sharing x and the weight tile (`_c4`,
//! `set_tma_cluster_four`), give the bits of one CTA each, for plain products and for
//! gate|up with the SwiGLU, at one and at several row tiles of 128 and 192 rows, and where a
//! weight's last feature tile is single (the second CTA of its pair idle). Small enough for the
//! CPU emulator, which models clusters (tools/cuda-emu: a cluster's blocks run together, each
//! with its own shared memory), so CI runs the default prefill path's kernels too.

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
            let run = |clusters: bool, four: bool| {
                b.set_tma_cluster_prefill(clusters);
                b.set_tma_cluster_four(four);
                let mut out = b.tensor(m, n);
                b.linear(&x, &w, &mut out);
                b.set_tma_cluster_four(false);
                b.download(&out)
            };
            let alone = run(false, false);
            assert!(alone.iter().all(|v| v.is_finite()), "{n}x{k}, {m} rows: non-finite output");
            assert_same_bits(&run(true, false), &alone, &|| {
                format!("linear BF16 {n}x{k}, {m} rows, in clusters against alone")
            });
            assert_same_bits(&run(true, true), &alone, &|| {
                format!("linear BF16 {n}x{k}, {m} rows, in clusters of four against alone")
            });
        }
    }
    // gate|up with the SwiGLU, gate's and up's rows interleaved (`_gli_c2`): 12 pairs of 64-feature
    // tiles, six a CTA of each cluster.
    let (gate, up) = (weight(&b, &mut rng, GgmlType::BF16, 768, 576), weight(&b, &mut rng, GgmlType::BF16, 768, 576));
    for m in [130, 300] {
        let x = b.upload(&activations(&mut rng, m, 576, Spread::DynamicRange), m, 576);
        let run = |clusters: bool, four: bool| {
            b.set_tma_cluster_prefill(clusters);
            b.set_tma_cluster_four(four);
            let mut out = b.tensor(m, 768);
            b.linear_swiglu(&x, &gate, &up, &mut out);
            b.set_tma_cluster_four(false);
            b.download(&out)
        };
        let alone = run(false, false);
        assert!(alone.iter().all(|v| v.is_finite()), "swiglu, {m} rows: non-finite output");
        assert_same_bits(&run(true, false), &alone, &|| format!("swiglu 768x576, {m} rows, in clusters against alone"));
        assert_same_bits(&run(true, true), &alone, &|| {
            format!("swiglu 768x576, {m} rows, in clusters of four against alone")
        });
    }
    b.set_tma_cluster_prefill(true);
    assert!(b.tma_cluster_launches() > before, "no launch ran in clusters");
}
