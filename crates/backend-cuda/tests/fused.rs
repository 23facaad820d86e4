//! Fused launches give the bits of their parts run apart (GPU.md, "Tests that keep it so"):
//! weights of one input run together (`linear_multi`), the residual add with the norm that reads
//! it (`add_rms_norm`), gate|up with the SwiGLU (`linear_swiglu`), the residual add in the store of
//! the product it adds (`linear_add`) and the norm inside the products that read it
//! (`norm_linear_multi`, `norm_linear_swiglu`).

#[path = "support/device.rs"]
mod device;
#[path = "support/kv.rs"]
mod kv;
#[path = "support/rows.rs"]
mod rows;

use rows::{assert_same_bits, norm_weight, on_tma, weight};

use plumb_core::{Backend, ElementwiseOps, GgmlType, LinearOps};
use plumb_verify::inputs::{Rng, Spread, activations};

#[test]
fn weights_run_together_give_the_bits_of_each_apart() {
    let Some(b) = device::backend("linear") else { return };
    let mut rng = Rng::new(device::seed());
    // `linear_multi` runs up to three weights of one type and width in one launch (q|k|v,
    // gate|up), each on whole feature tiles of its own: every output must be the one `linear`
    // gives alone, for widths that end in partial tiles (576 = 4.5 tiles of 128), for one to
    // five rows (the split K's last block folds) and more (`fold_chunks` folds; no split), and
    // for a run of four (three, then one) and of mixed types (split by type).
    let cases: [(&[usize], usize); 3] = [(&[576, 192, 192], 576), (&[300, 260], 4096), (&[64, 200, 72, 136], 1024)];
    for ty in [GgmlType::BF16, GgmlType::Q4_1, GgmlType::Q8_0] {
        for (widths, k) in cases {
            let ws: Vec<_> = widths.iter().map(|&n| weight(&b, &mut rng, ty, n, k)).collect();
            for m in [1, 3, 5, 8, 37, 64, 300] {
                let x = b.upload(&activations(&mut rng, m, k, Spread::DynamicRange), m, k);
                let mut together: Vec<_> = widths.iter().map(|&n| b.tensor(m, n)).collect();
                let refs: Vec<_> = ws.iter().collect();
                b.linear_multi(&x, &refs, &mut together.iter_mut().collect::<Vec<_>>());
                for (i, w) in ws.iter().enumerate() {
                    let mut alone = b.tensor(m, widths[i]);
                    b.linear(&x, w, &mut alone);
                    let (got, want) = (b.download(&together[i]), b.download(&alone));
                    assert_same_bits(&got, &want, &|| {
                        format!("{ty} {widths:?}x{k}, {m} rows: weight {i} run together")
                    });
                    assert!(want.iter().all(|v| v.is_finite()), "{ty}: non-finite output");
                }
            }
        }
    }
    // Mixed types: a bf16 weight between two Q8_0 weights runs apart, with the same bits.
    let k = 576;
    let ws = [
        weight(&b, &mut rng, GgmlType::Q8_0, 96, k),
        weight(&b, &mut rng, GgmlType::BF16, 128, k),
        weight(&b, &mut rng, GgmlType::Q8_0, 40, k),
    ];
    let x = b.upload(&activations(&mut rng, 3, k, Spread::DynamicRange), 3, k);
    let mut together: Vec<_> = ws.iter().map(|w| b.tensor(3, w.rows)).collect();
    b.linear_multi(&x, &ws.iter().collect::<Vec<_>>(), &mut together.iter_mut().collect::<Vec<_>>());
    for (w, got) in ws.iter().zip(&together) {
        let mut alone = b.tensor(3, w.rows);
        b.linear(&x, w, &mut alone);
        assert!(b.download(got).iter().zip(b.download(&alone)).all(|(a, c)| a.to_bits() == c.to_bits()), "mixed types");
    }
    eprintln!("linear_multi: every weight run together gives its bits apart");
}

#[test]
fn the_fused_residual_add_and_norm_gives_the_bits_of_the_two_apart() {
    let Some(b) = device::backend("add + norm") else { return };
    let mut rng = Rng::new(device::seed() ^ 0xadd0);
    let (k, n) = (576, 40);
    let w = weight(&b, &mut rng, GgmlType::BF16, n, k);
    let norm = norm_weight(&b, &mut rng, k);
    let bits = |t: &plumb_backend_cuda::CudaTensor| b.download(t).iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    for rows in [1, 7, 37, 300] {
        let h = activations(&mut rng, rows, k, Spread::DynamicRange);
        let d = activations(&mut rng, rows, k, Spread::Cancelling);
        let (mut apart, mut fused) = (b.upload(&h, rows, k), b.upload(&h, rows, k));
        let delta = b.upload(&d, rows, k);
        let (mut normed_apart, mut normed_fused) = (b.tensor(rows, k), b.tensor(rows, k));
        b.add(&mut apart, &delta);
        b.rms_norm(&apart, &norm, 1e-5, &mut normed_apart);
        b.add_rms_norm(&mut fused, &delta, &norm, 1e-5, &mut normed_fused);
        assert_eq!(bits(&fused), bits(&apart), "{rows} rows: the fused add's sums differ");
        assert_eq!(bits(&normed_fused), bits(&normed_apart), "{rows} rows: the fused norm differs");
        // The linear after it takes the fused kernel's rounded copy: the bits of a fresh rounding.
        let mut after = b.tensor(rows, n);
        b.linear(&normed_fused, &w, &mut after);
        let copy = b.upload(&b.download(&normed_fused), rows, k);
        let mut fresh = b.tensor(rows, n);
        b.linear(&copy, &w, &mut fresh);
        assert_eq!(bits(&after), bits(&fresh), "{rows} rows: linear after the fused norm differs");
    }
}

#[test]
fn the_fused_swiglu_gives_the_bits_of_the_products_and_silu_mul_apart() {
    let Some(b) = device::backend("linear_swiglu") else { return };
    let mut rng = Rng::new(device::seed() ^ 0x5e1);
    // `linear_swiglu` runs a quantized model's gate|up and silu_mul as one split launch (up to 64
    // rows, K of up to 32 chunks): every output must equal `linear_multi` then `silu_mul`, at
    // widths that end in a partial block of features, rows past the split kernel's and K past 32
    // chunks (apart), and a bf16 pair (the tensor-core products, apart).
    for ty in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::F32, GgmlType::BF16] {
        for (n, k) in [(1536usize, 576usize), (258, 1024), (40, 8192), (24, 8448)] {
            if !k.is_multiple_of(ty.info().expect("a weight type").block_elems) {
                continue;
            }
            let (gate, up) = (weight(&b, &mut rng, ty, n, k), weight(&b, &mut rng, ty, n, k));
            for m in [1, 3, 16, 17, 64, 65] {
                let x = b.upload(&activations(&mut rng, m, k, Spread::DynamicRange), m, k);
                let mut fused = b.tensor(m, n);
                b.linear_swiglu(&x, &gate, &up, &mut fused);
                let mut apart = b.tensor(m, n);
                plumb_core::swiglu_apart(&b, &x, &gate, &up, &mut apart);
                let (got, want) = (b.download(&fused), b.download(&apart));
                assert!(want.iter().all(|v| v.is_finite()), "{ty} {n}x{k}, {m} rows: non-finite output");
                assert_same_bits(&got, &want, &|| format!("{ty} {n}x{k}, {m} rows: the fused SwiGLU"));
            }
        }
    }
    eprintln!("linear_swiglu: the bits of its products and silu_mul apart");
}

#[test]
fn the_tensor_core_swiglu_in_one_launch_gives_the_bits_of_the_products_and_silu_mul_apart() {
    let Some(b) = device::backend("linear_swiglu (TMA)") else { return };
    if !on_tma(&b) {
        return;
    }
    let mut rng = Rng::new(device::seed() ^ 0x6e1);
    // bf16 gate|up on 128-feature TMA tasks run as one launch (`linear_tma_glu`): a task's
    // warpgroups take the same 64 features of gate and of up; whole-K tasks store the SwiGLU,
    // split ones leave both products' chunk partials to the pair's last block (up to four rows)
    // or to `fold_chunks_glu`. Every output must equal `linear_multi` then `silu_mul`, for
    // widths that end in a partial 64-feature tile (258, 40) and whole ones, K of one stage past
    // whole chunks (8,448), rows on each instance and fold (1 and 3 split, folded by the last
    // block; 16 split, folded apart; 64 whole K; past 64, the interleaved instances on 128-row
    // tiles, and at 2,000 rows of the widest on 192-row ones), and with the launch off; and the
    // down projection after it, which takes the launch's rounded copy, must give the bits of the
    // same rows rounded afresh.
    let (before, before_il) = (b.tma_glu_launches(), b.tma_gli_launches());
    for (n, k) in [(1536usize, 576usize), (258, 1024), (40, 8192), (2304, 4096), (96, 8448)] {
        let (gate, up) = (weight(&b, &mut rng, GgmlType::BF16, n, k), weight(&b, &mut rng, GgmlType::BF16, n, k));
        let down = (n % 32 == 0).then(|| weight(&b, &mut rng, GgmlType::BF16, 64, n));
        for m in [1, 3, 16, 64, 65, 130, 300, 700, 2000] {
            let what = format!("{n}x{k}, {m} rows");
            let x = b.upload(&activations(&mut rng, m, k, Spread::DynamicRange), m, k);
            let mut apart = b.tensor(m, n);
            plumb_core::swiglu_apart(&b, &x, &gate, &up, &mut apart);
            let want = b.download(&apart);
            assert!(want.iter().all(|v| v.is_finite()), "{what}: non-finite output");
            for (on, cl) in [(true, false), (true, true), (false, false)] {
                b.set_tma_glu(on);
                b.set_tma_cluster_prefill(cl);
                let mut fused = b.tensor(m, n);
                b.linear_swiglu(&x, &gate, &up, &mut fused);
                b.set_tma_cluster_prefill(true);
                assert_same_bits(&b.download(&fused), &want, &|| format!("{what}, GLU launch {on}, clusters {cl}"));
                if let Some(down) = &down {
                    let mut after = b.tensor(m, 64);
                    b.linear(&fused, down, &mut after);
                    let copy = b.upload(&b.download(&fused), m, n);
                    let mut fresh = b.tensor(m, 64);
                    b.linear(&copy, down, &mut fresh);
                    assert_same_bits(&b.download(&after), &b.download(&fresh), &|| {
                        format!("{what}, GLU launch {on}, clusters {cl}: down after it")
                    });
                }
            }
        }
    }
    b.set_tma_glu(true);
    // The interleaved instances stage gate and up as one tensor from the lower of the two in
    // memory (`tma::bf16_pair_map`) and read their pairs the other way when that is up: the same
    // pair of weights in both roles takes both orders, whatever the allocator did.
    let (gate, up) = (weight(&b, &mut rng, GgmlType::BF16, 1536, 576), weight(&b, &mut rng, GgmlType::BF16, 1536, 576));
    // In clusters of two sharing x too (`set_tma_cluster_prefill`).
    for (g, u, roles) in [(&gate, &up, "as made"), (&up, &gate, "swapped")] {
        for (m, cl) in [(130, false), (300, false), (130, true), (300, true)] {
            let what = format!("1536x576, {m} rows, gate and up {roles}, clusters {cl}");
            let x = b.upload(&activations(&mut rng, m, 576, Spread::DynamicRange), m, 576);
            let mut apart = b.tensor(m, 1536);
            plumb_core::swiglu_apart(&b, &x, g, u, &mut apart);
            let il = b.tma_gli_launches();
            let mut fused = b.tensor(m, 1536);
            b.set_tma_cluster_prefill(cl);
            b.linear_swiglu(&x, g, u, &mut fused);
            b.set_tma_cluster_prefill(true);
            assert!(b.tma_gli_launches() > il, "{what}: no interleaved launch");
            assert_same_bits(&b.download(&fused), &b.download(&apart), &|| what.clone());
        }
    }
    // Most of those calls run 128-feature tasks: the one launch must have run.
    assert!(b.tma_glu_launches() > before, "no GLU launch ran");
    assert!(b.tma_gli_launches() > before_il, "no interleaved GLU launch ran");
    eprintln!(
        "linear_swiglu (TMA): {} GLU launches ({} interleaved), the bits apart",
        b.tma_glu_launches() - before,
        b.tma_gli_launches() - before_il
    );
}

#[test]
fn the_residual_add_in_the_store_gives_the_bits_of_linear_then_add() {
    let Some(b) = device::backend("linear_add") else { return };
    let mut rng = Rng::new(device::seed() ^ 0xacc);
    // `linear_add` adds o's and down's products into the residual as the kernels store them: the
    // split and whole CUDA-core kernels, and the TMA kernel whole-K, folding a split K in its last
    // block (up to four rows) and in `fold_chunks` (more). Every element must equal `linear` then
    // `add`, rows past every kernel's tile included.
    for ty in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::F32, GgmlType::BF16] {
        for (n, k) in [(576usize, 1536usize), (200, 4096), (96, 14336)] {
            let w = weight(&b, &mut rng, ty, n, k);
            for m in [1, 3, 5, 16, 17, 33, 64, 65, 300] {
                let x = b.upload(&activations(&mut rng, m, k, Spread::DynamicRange), m, k);
                let h = activations(&mut rng, m, n, Spread::Cancelling);
                let (mut fused, mut apart) = (b.upload(&h, m, n), b.upload(&h, m, n));
                b.linear_add(&x, &w, &mut fused);
                plumb_core::linear_add_apart(&b, &x, &w, &mut apart);
                let (got, want) = (b.download(&fused), b.download(&apart));
                assert!(want.iter().all(|v| v.is_finite()), "{ty} {n}x{k}, {m} rows: non-finite output");
                assert_same_bits(&got, &want, &|| format!("{ty} {n}x{k}, {m} rows: the add in the store"));
            }
        }
    }
    eprintln!("linear_add: the bits of linear then add");
}

#[test]
fn the_residual_add_and_the_norm_after_it_give_the_bits_of_the_ops_apart() {
    let Some(b) = device::backend("linear_add_norm") else { return };
    let mut rng = Rng::new(device::seed() ^ 0xadd0);
    // `linear_add_norm` adds a product into the residual and norms the sum for the next sublayer:
    // the add in the product's store then `rms_norm` (decode-sized steps), the product then
    // `add_rms_norm` (the tensor-core products past 64 rows), or, with the norm inside the next
    // products on, the add alone and no normed rows. The sum and the normed rows must equal
    // `linear`, `add` and `rms_norm` apart.
    for norm_in in [false, true] {
        b.set_fuse_norm(norm_in);
        b.set_tma_norm(norm_in);
        for ty in [GgmlType::Q4_1, GgmlType::F32, GgmlType::BF16] {
            let (n, k) = (576usize, 1536usize);
            let (w, norm) = (weight(&b, &mut rng, ty, n, k), norm_weight(&b, &mut rng, n));
            for m in [1, 5, 64, 65, 300] {
                let what = format!("{ty} {n}x{k}, {m} rows, norm inside {norm_in}");
                let x = b.upload(&activations(&mut rng, m, k, Spread::DynamicRange), m, k);
                let h = activations(&mut rng, m, n, Spread::Cancelling);
                let (mut fused, mut apart) = (b.upload(&h, m, n), b.upload(&h, m, n));
                let normed = b.linear_add_norm(&x, &w, &mut fused, (&norm, 1e-5));
                let want_normed = plumb_core::linear_add_norm_apart(&b, &x, &w, &mut apart, (&norm, 1e-5));
                let (got, want) = (b.download(&fused), b.download(&apart));
                assert!(want.iter().all(|v| v.is_finite()), "{what}: non-finite sum");
                assert_same_bits(&got, &want, &|| format!("{what}: the sum"));
                match normed {
                    Some(normed) => {
                        let want = b.download(&want_normed);
                        assert!(want.iter().all(|v| v.is_finite()), "{what}: non-finite norm");
                        assert_same_bits(&b.download(&normed), &want, &|| format!("{what}: the normed rows"));
                    }
                    // Left to the next products: only where they take the norm inside.
                    None => assert!(norm_in, "{what}: no normed rows"),
                }
            }
        }
    }
    b.set_fuse_norm(false);
    b.set_tma_norm(false);
    eprintln!("linear_add_norm: the bits of linear, add and rms_norm apart");
}

#[test]
fn the_norm_inside_the_products_gives_the_bits_of_the_norm_apart() {
    let Some(b) = device::backend("norm_linear") else { return };
    // The norm inside the products is off by default (slower on the H200); the fused path is what
    // this test holds to the bits of the parts.
    b.set_fuse_norm(true);
    let mut rng = Rng::new(device::seed() ^ 0x90a);
    // `norm_linear_multi` and `norm_linear_swiglu` compute rms_norm(x) inside the split kernel's
    // blocks as they read x (up to 64 rows, in blocks of 16): every output must equal `rms_norm`
    // then the products (and the SwiGLU), for K below, at and past the norm's 256 threads'
    // columns, rows past a block's 16 and past the split kernel's 64 (apart), and the tensor-core
    // format last (apart: its products read the norm's rounded copy).
    for ty in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q6_K, GgmlType::F32, GgmlType::BF16] {
        for (widths, k) in [([576usize, 192, 192], 576usize), ([300, 260, 8], 4096), ([40, 24, 64], 8448)] {
            if !k.is_multiple_of(ty.info().expect("a weight type").block_elems) {
                continue;
            }
            let ws: Vec<_> = widths.iter().map(|&n| weight(&b, &mut rng, ty, n, k)).collect();
            let norm = norm_weight(&b, &mut rng, k);
            for m in [1, 3, 16, 17, 64, 65] {
                let x = b.upload(&activations(&mut rng, m, k, Spread::DynamicRange), m, k);
                let refs: Vec<_> = ws.iter().collect();
                let mut fused: Vec<_> = widths.iter().map(|&n| b.tensor(m, n)).collect();
                b.norm_linear_multi(&x, (&norm, 1e-5), &refs, &mut fused.iter_mut().collect::<Vec<_>>());
                let mut apart: Vec<_> = widths.iter().map(|&n| b.tensor(m, n)).collect();
                plumb_core::norm_linear_apart(&b, &x, (&norm, 1e-5), &refs, &mut apart.iter_mut().collect::<Vec<_>>());
                for (i, (f, a)) in fused.iter().zip(&apart).enumerate() {
                    let (got, want) = (b.download(f), b.download(a));
                    assert!(want.iter().all(|v| v.is_finite()), "{ty} {widths:?}x{k}, {m} rows: non-finite output");
                    assert_same_bits(&got, &want, &|| {
                        format!("{ty} {widths:?}x{k}, {m} rows: weight {i} after the norm")
                    });
                }
                let (gate, up) = (&ws[0], &ws[1]);
                if gate.rows != up.rows {
                    continue;
                }
                let (mut fused, mut apart) = (b.tensor(m, gate.rows), b.tensor(m, gate.rows));
                b.norm_linear_swiglu(&x, (&norm, 1e-5), gate, up, &mut fused);
                let normed = plumb_core::norm_apart(&b, &x, (&norm, 1e-5));
                plumb_core::swiglu_apart(&b, &normed, gate, up, &mut apart);
                assert_same_bits(&b.download(&fused), &b.download(&apart), &|| {
                    format!("{ty} {widths:?}x{k}, {m} rows: the SwiGLU after the norm")
                });
            }
        }
    }
    eprintln!("norm_linear_multi, norm_linear_swiglu: the bits of the norm apart");
}

#[test]
fn the_norm_inside_the_tma_products_gives_the_bits_of_the_norm_apart() {
    let Some(b) = device::backend("norm_linear (TMA)") else { return };
    if !on_tma(&b) {
        return;
    }
    let mut rng = Rng::new(device::seed() ^ 0x7a0);
    // Decode rows' tensor-core products compute rms_norm(x) inside their TMA launch (the `_norm`
    // instances): the consumers write the activation tiles from x, swizzled and k-permuted as the
    // norm's rounded copy would have arrived. Every output must equal `rms_norm`
    // then the products, and the SwiGLU after it in one launch and apart, for K ending in a
    // partial stage (576), of one norm batch (4,096: whole K and split over blocks) and past it
    // (8,448), widths ending in partial tiles, one to eight rows, and nine (the norm apart).
    let before = b.tma_norm_launches();
    let cases: [([usize; 3], usize); 4] =
        [([192, 192, 576], 576), ([300, 300, 8], 4096), ([1536, 1536, 64], 4096), ([96, 96, 40], 8448)];
    for (widths, k) in cases {
        let ws: Vec<_> = widths.iter().map(|&n| weight(&b, &mut rng, GgmlType::BF16, n, k)).collect();
        let refs: Vec<_> = ws.iter().collect();
        let norm = norm_weight(&b, &mut rng, k);
        for m in [1, 2, 5, 8, 9] {
            let what = format!("{widths:?}x{k}, {m} rows");
            let x = b.upload(&activations(&mut rng, m, k, Spread::DynamicRange), m, k);
            b.set_tma_norm(false);
            let mut apart: Vec<_> = widths.iter().map(|&n| b.tensor(m, n)).collect();
            plumb_core::norm_linear_apart(&b, &x, (&norm, 1e-5), &refs, &mut apart.iter_mut().collect::<Vec<_>>());
            let mut glu_apart = b.tensor(m, widths[0]);
            let normed = plumb_core::norm_apart(&b, &x, (&norm, 1e-5));
            plumb_core::swiglu_apart(&b, &normed, &ws[0], &ws[1], &mut glu_apart);
            let glu_want = b.download(&glu_apart);
            assert!(glu_want.iter().all(|v| v.is_finite()), "{what}: non-finite SwiGLU");
            b.set_tma_norm(true);
            let mut fused: Vec<_> = widths.iter().map(|&n| b.tensor(m, n)).collect();
            b.norm_linear_multi(&x, (&norm, 1e-5), &refs, &mut fused.iter_mut().collect::<Vec<_>>());
            for (i, (f, a)) in fused.iter().zip(&apart).enumerate() {
                let (got, want) = (b.download(f), b.download(a));
                assert!(want.iter().all(|v| v.is_finite()), "{what}: non-finite output");
                assert_same_bits(&got, &want, &|| format!("{what}: weight {i} with the norm inside"));
            }
            for glu in [true, false] {
                b.set_tma_glu(glu);
                let mut g = b.tensor(m, widths[0]);
                b.norm_linear_swiglu(&x, (&norm, 1e-5), &ws[0], &ws[1], &mut g);
                assert_same_bits(&b.download(&g), &glu_want, &|| format!("{what}: the SwiGLU, GLU launch {glu}"));
            }
            b.set_tma_glu(true);
        }
    }
    b.set_tma_norm(false);
    assert!(b.tma_norm_launches() > before, "no launch computed the norm inside");
    eprintln!("norm inside the TMA products: {} launches, the bits apart", b.tma_norm_launches() - before);
}

#[test]
fn rope_and_the_kv_store_in_the_qkv_launch_give_the_bits_of_the_ops_apart() {
    use plumb_core::{AttentionOps, ForwardBatch, KvStore, RopeOps};
    let Some(b) = device::backend("norm_qkv_rope_write_kv") else { return };
    let mut rng = Rng::new(device::seed() ^ 0x40be);
    // `norm_qkv_rope_write_kv` runs q|k|v of rms_norm(x) as one split launch that rotates q and k
    // and stores k and v at their slots as it folds (GGUF's adjacent pairs; rotate-half apart): q,
    // k and v and the caches must equal `norm_linear_multi` then `rope_write_kv`, for one row and
    // for lanes of several, every store, a whole and a partial rotation.
    let (heads, kv_heads, hd, hidden) = (9, 3, 64, 576);
    let bits = |t: &plumb_backend_cuda::CudaTensor| b.download(t).iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    for lens in [&[1usize][..], &[5, 17, 40]] {
        let (lanes, spec) = kv::scrambled_lanes(lens, 16, 7, kv_heads, hd);
        let mut batch = ForwardBatch { block_size: spec.block_size, lanes: lanes.clone(), ..Default::default() };
        for (lane, &len) in lens.iter().enumerate() {
            for pos in 0..len {
                batch.push_row(lane, 0, pos);
            }
        }
        let rows = batch.num_rows();
        // The norm inside the q|k|v launch, launched before it (the default), and x normed
        // already (`normed`: no norm, as after an `add_rms_norm`).
        for (store, norm_in, normed) in [
            (KvStore::F32, true, false),
            (KvStore::F16, true, false),
            (KvStore::Bf16, true, false),
            (KvStore::F16, false, false),
            (KvStore::F16, false, true),
        ] {
            b.set_kv_store(store);
            b.set_fuse_norm(norm_in);
            for ty in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::F32, GgmlType::BF16] {
                for (rot, rotate_half) in [(32, false), (24, false), (32, true)] {
                    let what = format!(
                        "{} KV, {ty}, {rows} rows, {rot} pairs, rotate_half {rotate_half}, norm inside {norm_in}, \
                         normed already {normed}",
                        store.name()
                    );
                    let ws = [
                        weight(&b, &mut rng, ty, heads * hd, hidden),
                        weight(&b, &mut rng, ty, kv_heads * hd, hidden),
                        weight(&b, &mut rng, ty, kv_heads * hd, hidden),
                    ];
                    let norm = norm_weight(&b, &mut rng, hidden);
                    let inv_freq: Vec<f64> =
                        (0..rot).map(|i| 1.0 / 10_000f64.powf(2.0 * i as f64 / hd as f64)).collect();
                    let table = b.rope_table(&batch.positions, &inv_freq);
                    let x = b.upload(&activations(&mut rng, rows, hidden, Spread::DynamicRange), rows, hidden);
                    let outs =
                        || [b.tensor(rows, heads * hd), b.tensor(rows, kv_heads * hd), b.tensor(rows, kv_heads * hd)];
                    let heads3 = (heads, kv_heads, hd);
                    let ([mut q1, mut k1, mut v1], mut fused) = (outs(), b.new_kv_cache(&spec));
                    let wr = [&ws[0], &ws[1], &ws[2]];
                    let n = (&norm, 1e-5);
                    b.norm_qkv_rope_write_kv(
                        &x,
                        (!normed).then_some(n),
                        wr,
                        [&mut q1, &mut k1, &mut v1],
                        &table,
                        &mut fused,
                        0,
                        &batch,
                        heads3,
                        rotate_half,
                    );
                    let ([mut q2, mut k2, mut v2], mut apart) = (outs(), b.new_kv_cache(&spec));
                    if normed {
                        b.linear_multi(&x, &wr, &mut [&mut q2, &mut k2, &mut v2]);
                    } else {
                        plumb_core::norm_linear_apart(&b, &x, n, &wr, &mut [&mut q2, &mut k2, &mut v2]);
                    }
                    b.rope_write_kv(&mut q2, &mut k2, &v2, &table, &mut apart, 0, &batch, heads3, rotate_half);
                    assert!(b.download(&q2).iter().all(|v| v.is_finite()), "{what}: non-finite q");
                    assert_eq!(bits(&q1), bits(&q2), "{what}: q differs");
                    assert_eq!(bits(&k1), bits(&k2), "{what}: k differs");
                    assert_eq!(bits(&v1), bits(&v2), "{what}: v differs");
                    // Every row attends over every position its lane wrote: the caches read back the same.
                    let (mut a, mut c) = (b.tensor(rows, heads * hd), b.tensor(rows, heads * hd));
                    b.attention(&q2, &apart, 0, &batch, heads, 0.125, &mut a);
                    b.attention(&q2, &fused, 0, &batch, heads, 0.125, &mut c);
                    let (a, c) = (b.download(&a), b.download(&c));
                    assert!(a.iter().all(|v| v.is_finite()), "{what}: non-finite attention");
                    assert!(a.iter().zip(&c).all(|(p, r)| p.to_bits() == r.to_bits()), "{what}: the caches differ");
                }
            }
        }
    }
    eprintln!("norm_qkv_rope_write_kv: the bits of the products, RoPE and the K/V store apart");
}
