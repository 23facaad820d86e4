//! Per-op bit tests on the CUDA backend (GPU.md, "Tests that keep it so"): for every batch size M
//! in {1, 2, 3, 7, 8, 9, 16, 64, 255, 256, 257, 4096}, row r of a batch of M equals, bit for bit,
//! the same row computed alone — for every op, every weight format, across K-chunk, attention
//! tile (64) and split boundaries (a tile for the f32 store, 256 positions on the tensor cores).
//! Also: K/V written in one batch or in chunks reads back identically.

#[path = "support/device.rs"]
mod device;
#[path = "support/kv.rs"]
mod kv;
#[path = "support/rows.rs"]
mod rows;

use kv::{filled_cache, scrambled_lanes};
use rows::{MAX_M, assert_same_bits, check_rows, norm_weight, pick, weight};

use plumb_backend_cuda::CudaBackend;
use plumb_core::{
    AttentionOps, Backend, ElementwiseOps, ForwardBatch, GgmlType, HostBytes, KvSpec, KvStore, LaneView, LinearOps,
    RopeOps, WeightSource,
};
use plumb_verify::inputs::{Rng, Spread, activations};

#[test]
fn linear_rows_are_batch_invariant_for_every_format() {
    let Some(b) = device::backend("linear") else { return };
    let mut rng = Rng::new(device::seed());
    // K = 576 crosses one 256-wide chunk boundary and ends in a partial chunk (K-quants, whose
    // rows are whole 256-element super-blocks, take 768: three chunks); N = 40 and 24 leave
    // partial blocks of 8 features.
    // More rows than the split kernel takes run on `linear_` (a warp a feature) or, with
    // `set_linear_tile`, on `linear_tile` (register tiles of 64 features and 64 or 32 rows,
    // crossed by N = 40 and 24 and by 255 or 257 rows), whole-K or a block a chunk (these few
    // tiles split where `set_tile_split` allows): each must give each row's solo bits.
    for (tile, split) in [(None, false), (Some(64), true), (Some(64), false), (Some(32), true)] {
        b.set_linear_tile(tile);
        b.set_tile_split(split);
        for (n, k) in [(40, 576), (24, 1536)] {
            let x = activations(&mut rng, MAX_M, k.max(768), Spread::DynamicRange);
            for ty in GgmlType::DEQUANTIZABLE {
                let block = ty.info().expect("dequantizable types have a geometry").block_elems;
                let k = if k.is_multiple_of(block) { k } else { k.next_multiple_of(block).max(768) };
                let x = &x[..MAX_M * k];
                let w = weight(&b, &mut rng, ty, n, k);
                check_rows(&format!("linear {ty} {n}x{k} (tile {tile:?}, split {split})"), n, &mut |rows| {
                    let xt = b.upload(&pick(x, k, rows), rows.len(), k);
                    let mut out = b.tensor(rows.len(), n);
                    b.linear(&xt, &w, &mut out);
                    b.download(&out)
                });
            }
        }
    }
}

#[test]
fn wide_weights_at_few_rows_give_the_bits_of_more_rows() {
    let Some(b) = device::backend("linear_wide") else { return };
    let mut rng = Rng::new(device::seed() ^ 0x1de);
    // Weights of 8,192 features or more at up to four rows run on `linear_wide` (a warp's whole
    // rows at once: the default model's LM head), five rows and more on `linear_split`: each of
    // the first rows must come out as it does in a batch of nine. 8,196 features end in a partial
    // block of sixteen; K-quants take K = 768, whose Q6_K rows (630 bytes) are not whole words and
    // stay on `linear_split`. Its grid holds a block a group of sixteen features; a second pass
    // runs it persistent, seven blocks, so each walks 73-74 of the 513 groups. A third pass runs
    // Q8_0 on `linear_replay_q8_0` (a thread a feature, `set_wide_replay`), its last block of
    // 32 features holding four: at K = 576 (18 blocks of 32, the last odd, starting mid-word) and
    // 608 (19, the last even, its quants read across the row's end).
    let n = 8196;
    let warp_passes =
        [None, Some(7)].into_iter().flat_map(|g| GgmlType::DEQUANTIZABLE.into_iter().map(move |t| (t, g, false, None)));
    let replay_pass = [576, 608].map(|k| (GgmlType::Q8_0, None, true, Some(k)));
    for (ty, grid, replay, k) in warp_passes.chain(replay_pass) {
        b.set_wide_grid(grid);
        b.set_wide_replay(replay);
        let block = ty.info().expect("dequantizable types have a geometry").block_elems;
        let k = k.unwrap_or(if 576 % block == 0 { 576 } else { 768 });
        let w = weight(&b, &mut rng, ty, n, k);
        let x = activations(&mut rng, 9, k, Spread::DynamicRange);
        let mut nine = b.tensor(9, n);
        b.linear(&b.upload(&x, 9, k), &w, &mut nine);
        let nine = b.download(&nine);
        assert!(nine.iter().all(|v| v.is_finite()), "{ty}: non-finite output");
        for m in 1..=4 {
            let mut few = b.tensor(m, n);
            b.linear(&b.upload(&x[..m * k], m, k), &w, &mut few);
            let how = if replay { "a thread a feature".to_string() } else { format!("grid capped at {grid:?} blocks") };
            assert_same_bits(&b.download(&few), &nine[..m * n], &|| {
                format!("linear {ty} {n}x{k}: {m} rows against nine ({how})")
            });
        }
    }
    b.set_wide_replay(false);
    eprintln!("linear_wide and linear_replay_q8_0: the bits of linear_split");
}

#[test]
fn chains_that_underflow_to_minus_zero_keep_the_bits_of_the_steps_past_k() {
    let Some(b) = device::backend("linear") else { return };
    // An fmaf whose exact result underflows keeps its sign, so a lane's chain can hold -0; the
    // canonical form's steps past K (fmaf(0, 0, s)) make it +0. Kernels that leave those steps
    // out (`linear_tile`, `linear_replay_q8_0`) add the +0 they stand for. Q8_0 weights of the
    // smallest f16 scale (2^-24) and quants 1 times x = -2^-126: each product is -2^-150, half
    // the smallest subnormal, which rounds to -0; at K = 576 (a last chunk of 64) every element
    // is -0 + -0 + (+0) = +0 on every kernel: wide and replay (one row), split (nine), `linear_`
    // and `linear_tile` in tiles of 64 and 32 rows (100).
    let (n, k) = (8192, 576);
    let block: Vec<u8> = [1u8, 0].into_iter().chain(std::iter::repeat_n(1u8, 32)).collect();
    let bytes = HostBytes::from_vec(block.repeat(n * k / 32));
    let w = b.load_weight(WeightSource { name: "tiny".into(), ty: GgmlType::Q8_0, rows: n, cols: k, bytes }).unwrap();
    let cases = [(1, None, false), (1, None, true), (9, None, false), (100, None, false), (100, Some(64), false)];
    for (m, tile, replay) in cases.into_iter().chain([(100, Some(32), false)]) {
        b.set_linear_tile(tile);
        b.set_wide_replay(replay);
        let mut out = b.tensor(m, n);
        b.linear(&b.upload(&vec![-f32::MIN_POSITIVE; m * k], m, k), &w, &mut out);
        if let Some(j) = b.download(&out).iter().position(|v| v.to_bits() != 0) {
            panic!("{m} rows (tile {tile:?}, replay {replay}): element {j} is not +0");
        }
    }
    b.set_linear_tile(None);
    b.set_wide_replay(false);
}

#[test]
fn tensor_core_linear_rows_are_batch_invariant_at_a_long_k() {
    let Some(b) = device::backend("linear") else { return };
    let mut rng = Rng::new(device::seed());
    // bf16 weights run on the tensor cores: up to 64 rows on the decode kernel
    // (kernels/linear_mma.cu), which at K = 8192 (8 chunks of 1,024: `fold_chunk`) and 40
    // features splits K into blocks whose partials the last to arrive folds; more rows on the
    // wgmma kernel (kernels/linear_wgmma.cu). Every path must give a row the same bits. On the
    // TMA kernels, 32 and 64 rows of these narrow weights keep whole K on tasks of 64 features
    // (`linear_tma_bf16_n{32,64}_f64`) where their chunks are short, and split it where they
    // are long; 200 features end in a partial 64-feature tile. K = 9248 takes ten chunks of
    // 1,024, the last of 32 elements (the rest of its stages zeros), split at 64 rows too.
    // 16,984 features (133 tiles of 128, the last partial) at K = 512 fill the device at 33-64
    // rows with whole-K tasks of 128 features, which run alone and (`set_tma_cluster`) in
    // clusters of two sharing x (`linear_tma_bf16_n64_c2`), the odd last tile's pair with an idle
    // second CTA. Past 64 rows every weight runs whole-K tasks of 128 or 192 rows, alone and
    // (`set_tma_cluster_prefill`) in clusters of two (`linear_tma_bf16_n{128,192}_c2`), a single
    // or odd last tile (40, 200, 72 and 16,984 features) paired with an idle CTA.
    for (n, k) in [(40, 8192), (200, 1280), (72, 9248), (16_984, 512)] {
        let x = activations(&mut rng, MAX_M, k, Spread::DynamicRange);
        let w = weight(&b, &mut rng, GgmlType::BF16, n, k);
        let modes: &[(bool, bool)] = if n == 16_984 {
            &[(false, false), (true, false), (false, true)]
        } else {
            &[(false, false), (false, true)]
        };
        for &(decode, prefill) in modes {
            b.set_tma_cluster(decode);
            b.set_tma_cluster_prefill(prefill);
            let mode = match (decode, prefill) {
                (true, _) => ", clusters of two at 64 rows",
                (_, true) => ", clusters of two at prefill rows",
                _ => "",
            };
            let what = format!("linear BF16 {n}x{k}{mode}");
            check_rows(&what, n, &mut |rows| {
                let xt = b.upload(&pick(&x, k, rows), rows.len(), k);
                let mut out = b.tensor(rows.len(), n);
                b.linear(&xt, &w, &mut out);
                b.download(&out)
            });
        }
        b.set_tma_cluster(false);
        b.set_tma_cluster_prefill(true);
    }
}

/// With bf16 weights loaded, `rms_norm` (and `silu_mul`) writes the rounded copy of its output the next
/// tensor-core `linear` takes instead of rounding again: the products must equal those of the
/// same values uploaded fresh, and a launch that writes the output in between must void the copy.
#[test]
fn a_norms_rounded_copy_gives_the_bits_of_rounding_again() {
    let Some(b) = device::backend("norm + linear") else { return };
    let mut rng = Rng::new(device::seed() ^ 0x4e04);
    let (n, k, rows) = (72, 576, 37);
    let w1 = weight(&b, &mut rng, GgmlType::BF16, n, k);
    let w2 = weight(&b, &mut rng, GgmlType::BF16, 40, k);
    let norm = norm_weight(&b, &mut rng, k);
    let x = b.upload(&activations(&mut rng, rows, k, Spread::DynamicRange), rows, k);
    let y = b.upload(&activations(&mut rng, rows, k, Spread::Normal), rows, k);
    let bits = |t: &plumb_backend_cuda::CudaTensor| b.download(t).iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    let fresh = |t: &plumb_backend_cuda::CudaTensor, w: &plumb_backend_cuda::CudaWeight| {
        let copy = b.upload(&b.download(t), rows, k);
        let mut out = b.tensor(rows, w.rows);
        b.linear(&copy, w, &mut out);
        bits(&out)
    };
    // Norm, then one linear; norm, then two at once (as q/k/v and gate/up take it).
    let mut normed = b.tensor(rows, k);
    b.rms_norm(&x, &norm, 1e-5, &mut normed);
    let mut one = b.tensor(rows, n);
    b.linear(&normed, &w1, &mut one);
    assert_eq!(bits(&one), fresh(&normed, &w1), "linear after the norm differs from a fresh rounding");
    b.rms_norm(&x, &norm, 1e-5, &mut normed);
    let (mut a, mut c) = (b.tensor(rows, n), b.tensor(rows, 40));
    b.linear_multi(&normed, &[&w1, &w2], &mut [&mut a, &mut c]);
    assert_eq!(bits(&a), fresh(&normed, &w1), "linear_multi after the norm differs (first weight)");
    assert_eq!(bits(&c), fresh(&normed, &w2), "linear_multi after the norm differs (second weight)");
    // silu_mul writes one too, for the down projection.
    let mut act = b.tensor(rows, k);
    b.silu_mul(&x, &y, &mut act);
    b.linear(&act, &w1, &mut one);
    assert_eq!(bits(&one), fresh(&act, &w1), "linear after silu_mul differs from a fresh rounding");
    // A launch that changes the norm's output voids its copy.
    b.rms_norm(&x, &norm, 1e-5, &mut normed);
    b.add(&mut normed, &y);
    b.linear(&normed, &w1, &mut one);
    assert_eq!(bits(&one), fresh(&normed, &w1), "linear used a rounded copy older than its input");
}

#[test]
fn rope_of_q_and_k_in_one_launch_gives_the_bits_of_two() {
    let Some(b) = device::backend("rope q + k") else { return };
    let mut rng = Rng::new(device::seed() ^ 0x0e0e);
    let (heads, kv_heads, head_dim) = (9, 3, 64);
    // A partial rotation (48 of 64 dims) as well as a whole one.
    for (rot, rows) in [(32, 1), (32, 37), (24, 300)] {
        let inv_freq: Vec<f64> = (0..rot).map(|i| 1.0 / 10_000f64.powf(2.0 * i as f64 / head_dim as f64)).collect();
        let positions: Vec<u32> = (0..rows as u32).map(|r| (r * 977 + 5) % 8192).collect();
        let table = b.rope_table(&positions, &inv_freq);
        let q = activations(&mut rng, rows, heads * head_dim, Spread::DynamicRange);
        let k = activations(&mut rng, rows, kv_heads * head_dim, Spread::Normal);
        let bits = |t: &plumb_backend_cuda::CudaTensor| b.download(t).iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
        for rotate_half in [false, true] {
            let (mut q1, mut k1) = (b.upload(&q, rows, heads * head_dim), b.upload(&k, rows, kv_heads * head_dim));
            let (mut q2, mut k2) = (b.upload(&q, rows, heads * head_dim), b.upload(&k, rows, kv_heads * head_dim));
            if rotate_half {
                b.rope_rotate_half(&mut q1, &table, heads, head_dim);
                b.rope_rotate_half(&mut k1, &table, kv_heads, head_dim);
            } else {
                b.rope(&mut q1, &table, heads, head_dim);
                b.rope(&mut k1, &table, kv_heads, head_dim);
            }
            b.rope_qk(&mut q2, &mut k2, &table, heads, kv_heads, head_dim, rotate_half);
            let what = format!("{rows} rows, {rot} pairs, rotate_half {rotate_half}");
            assert_eq!(bits(&q2), bits(&q1), "{what}: q differs");
            assert_eq!(bits(&k2), bits(&k1), "{what}: k differs");
            assert_ne!(bits(&q2), q.iter().map(|v| v.to_bits()).collect::<Vec<u32>>(), "{what}: q was not rotated");
        }
    }
}

#[test]
fn rope_and_the_kv_write_in_one_launch_give_the_bits_of_the_two_apart() {
    let Some(b) = device::backend("rope + write_kv") else { return };
    let mut rng = Rng::new(device::seed() ^ 0x0f0f);
    let (lanes, spec, lens) = lanes_and_spec();
    let (heads, hd) = (9, spec.head_dim);
    let width = spec.num_kv_heads * hd;
    let mut batch = ForwardBatch { block_size: spec.block_size, lanes: lanes.clone(), ..Default::default() };
    for (lane, len) in lens.into_iter().enumerate() {
        for pos in 0..len {
            batch.push_row(lane, 0, pos);
        }
    }
    let rows = batch.num_rows();
    let bits = |t: &plumb_backend_cuda::CudaTensor| b.download(t).iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    for store in STORES {
        b.set_kv_store(store);
        // A whole rotation and a partial one (24 of 32 pairs: the last 16 dims are stored as they are).
        for (rot, rotate_half) in [(32, true), (24, false), (24, true)] {
            let inv_freq: Vec<f64> = (0..rot).map(|i| 1.0 / 10_000f64.powf(2.0 * i as f64 / hd as f64)).collect();
            let table = b.rope_table(&batch.positions, &inv_freq);
            let q = activations(&mut rng, rows, heads * hd, Spread::Normal);
            let (k, v) = (
                activations(&mut rng, rows, width, Spread::Normal),
                activations(&mut rng, rows, width, Spread::DynamicRange),
            );
            let vt = b.upload(&v, rows, width);
            let (mut q1, mut k1) = (b.upload(&q, rows, heads * hd), b.upload(&k, rows, width));
            let mut apart = b.new_kv_cache(&spec);
            b.rope_qk(&mut q1, &mut k1, &table, heads, spec.num_kv_heads, hd, rotate_half);
            b.write_kv(&mut apart, 0, &k1, &vt, &batch);
            let (mut q2, mut k2) = (b.upload(&q, rows, heads * hd), b.upload(&k, rows, width));
            let mut together = b.new_kv_cache(&spec);
            b.rope_write_kv(
                &mut q2,
                &mut k2,
                &vt,
                &table,
                &mut together,
                0,
                &batch,
                (heads, spec.num_kv_heads, hd),
                rotate_half,
            );
            let what = format!("{} KV, {rot} pairs, rotate_half {rotate_half}", store.name());
            assert_eq!(bits(&q2), bits(&q1), "{what}: q differs");
            assert_eq!(bits(&k2), bits(&k1), "{what}: k differs");
            // Every row attends over every position its lane wrote: the caches read back the same.
            let (mut a, mut c) = (b.tensor(rows, heads * hd), b.tensor(rows, heads * hd));
            b.attention(&q1, &apart, 0, &batch, heads, 0.125, &mut a);
            b.attention(&q1, &together, 0, &batch, heads, 0.125, &mut c);
            let (a, c) = (b.download(&a), b.download(&c));
            assert!(a.iter().all(|x| x.is_finite()), "{what}: non-finite attention");
            assert!(a.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()), "{what}: the caches differ");
        }
    }
    eprintln!("rope_write_kv: the bits of rope_qk then write_kv, every store and layout");
}

#[test]
fn row_wise_ops_are_batch_invariant() {
    let Some(b) = device::backend("row-wise ops") else { return };
    let mut rng = Rng::new(device::seed());
    let cols = 576;
    let x = activations(&mut rng, MAX_M, cols, Spread::DynamicRange);
    let y = activations(&mut rng, MAX_M, cols, Spread::Normal);
    let wv: Vec<f32> = (0..cols).map(|_| (1.0 + 0.1 * rng.normal()) as f32).collect();
    let src = |name: &str| WeightSource {
        name: name.into(),
        ty: GgmlType::F32,
        rows: 1,
        cols,
        bytes: HostBytes::from_vec(wv.iter().flat_map(|v| v.to_le_bytes()).collect()),
    };
    let (norm, bias) = (b.load_weight(src("norm")).unwrap(), b.load_weight(src("bias")).unwrap());
    check_rows("rms_norm", cols, &mut |rows| {
        let mut out = b.tensor(rows.len(), cols);
        b.rms_norm(&b.upload(&pick(&x, cols, rows), rows.len(), cols), &norm, 1e-5, &mut out);
        b.download(&out)
    });
    check_rows("add", cols, &mut |rows| {
        let mut acc = b.upload(&pick(&x, cols, rows), rows.len(), cols);
        b.add(&mut acc, &b.upload(&pick(&y, cols, rows), rows.len(), cols));
        b.download(&acc)
    });
    check_rows("add_bias", cols, &mut |rows| {
        let mut t = b.upload(&pick(&x, cols, rows), rows.len(), cols);
        b.add_bias(&mut t, &bias);
        b.download(&t)
    });
    check_rows("silu_mul", cols, &mut |rows| {
        let mut out = b.tensor(rows.len(), cols);
        let (g, u) = (pick(&x, cols, rows), pick(&y, cols, rows));
        b.silu_mul(&b.upload(&g, rows.len(), cols), &b.upload(&u, rows.len(), cols), &mut out);
        b.download(&out)
    });
    let positions: Vec<u32> = (0..MAX_M as u32).map(|r| (r * 977) % 8192).collect();
    let inv_freq: Vec<f64> = (0..32).map(|i| 1.0 / 10_000f64.powf(2.0 * i as f64 / 64.0)).collect();
    check_rows("rope", cols, &mut |rows| {
        let pos: Vec<u32> = rows.iter().map(|&r| positions[r]).collect();
        let table = b.rope_table(&pos, &inv_freq);
        let mut t = b.upload(&pick(&x, cols, rows), rows.len(), cols);
        b.rope(&mut t, &table, cols / 64, 64);
        b.download(&t)
    });
    let ids: Vec<u32> = (0..MAX_M).map(|_| rng.below(300) as u32).collect();
    for ty in [GgmlType::Q4_1, GgmlType::Q6_K, GgmlType::BF16] {
        let table = weight(&b, &mut rng, ty, 300, 512);
        check_rows(&format!("embed {ty}"), 512, &mut |rows| {
            let sel: Vec<u32> = rows.iter().map(|&r| ids[r]).collect();
            let mut out = b.tensor(rows.len(), 512);
            b.embed(&sel, &table, &mut out);
            b.download(&out)
        });
    }
    let xt = b.upload(&x, MAX_M, cols);
    check_rows("gather_rows", cols, &mut |rows| {
        let sel: Vec<u32> = rows.iter().map(|&r| ids[r] * 13).collect();
        let mut out = b.tensor(rows.len(), cols);
        b.gather_rows(&xt, &sel, &mut out);
        b.download(&out)
    });
}

/// Three lanes over scattered blocks; lane 0 is long enough to cross two attention splits.
fn lanes_and_spec() -> (Vec<LaneView>, KvSpec, [usize; 3]) {
    let lens = [2100usize, 700, 69];
    let (lanes, spec) = scrambled_lanes(&lens, 16, 37, 3, 64);
    (lanes, spec, lens)
}

/// Every K/V store: f32 runs the CUDA-core kernel, f16 and bf16 the tensor-core one.
const STORES: [KvStore; 3] = [KvStore::F32, KvStore::F16, KvStore::Bf16];

/// Whether prefill chunks' attention takes the warpgroup MMA on this device (Hopper), as set.
fn wgmma_on(b: &CudaBackend) -> bool {
    b.kernel_choices().iter().any(|&(name, on)| name == "attention_prefill_wgmma" && on)
}

/// Runs `check` on a backend set to each store in turn (nothing without a GPU).
fn on_every_store(check: fn(&CudaBackend, KvStore)) {
    let Some(b) = device::backend("attention") else { return };
    for store in STORES {
        b.set_kv_store(store);
        check(&b, store);
    }
}

#[test]
fn attention_rows_are_batch_invariant_across_tiles_and_splits() {
    on_every_store(attention_rows_invariant);
}

fn attention_rows_invariant(b: &CudaBackend, store: KvStore) {
    let mut rng = Rng::new(device::seed());
    let (lanes, spec, lens) = lanes_and_spec();
    let (heads, width) = (9, spec.num_kv_heads * spec.head_dim);
    let total: usize = lens.iter().sum();
    let k = activations(&mut rng, total, width, Spread::Normal);
    let v = activations(&mut rng, total, width, Spread::DynamicRange);
    let whole = filled_cache(b, &k, &v, &lanes, &spec, &lens, &|_| total);
    let chunked = filled_cache(b, &k, &v, &lanes, &spec, &lens, &|s| [1, 7, 64, 3, 255][s % 5]);
    // Query rows: the positions at tile and split edges of lane 0 first, then random rows.
    let edges = [0u32, 1, 63, 64, 65, 1023, 1024, 1025, 2047, 2048, 2099];
    let rows: Vec<(usize, u32)> = (0..MAX_M)
        .map(|g| match edges.get(g) {
            Some(&p) => (0, p),
            None => {
                let lane = g % 3;
                (lane, rng.below(lens[lane]) as u32)
            }
        })
        .collect();
    let q: Vec<f32> =
        activations(&mut rng, MAX_M, heads * spec.head_dim, Spread::Normal).iter().map(|x| x * 0.3).collect();
    let cols = heads * spec.head_dim;
    let names =
        [format!("attention ({} KV)", store.name()), format!("attention over chunk-written {} K/V", store.name())];
    for (name, kv) in [(&names[0], &whole), (&names[1], &chunked)] {
        check_rows(name, cols, &mut |sel| {
            let mut batch = ForwardBatch { block_size: spec.block_size, lanes: lanes.clone(), ..Default::default() };
            for &g in sel {
                batch.push_row(rows[g].0, 0, rows[g].1 as usize);
            }
            let mut out = b.tensor(sel.len(), cols);
            b.attention(&b.upload(&pick(&q, cols, sel), sel.len(), cols), kv, 0, &batch, heads, 0.125, &mut out);
            b.download(&out)
        });
    }
    // K/V written whole or in chunks read back identically.
    let mut batch = ForwardBatch { block_size: spec.block_size, lanes: lanes.clone(), ..Default::default() };
    for &(lane, pos) in &rows[..257] {
        batch.push_row(lane, 0, pos as usize);
    }
    let qt = b.upload(&q[..257 * cols], 257, cols);
    let (mut a, mut c) = (b.tensor(257, cols), b.tensor(257, cols));
    b.attention(&qt, &whole, 0, &batch, heads, 0.125, &mut a);
    b.attention(&qt, &chunked, 0, &batch, heads, 0.125, &mut c);
    let (a, c) = (b.download(&a), b.download(&c));
    assert!(
        a.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()),
        "write_kv in chunks differs from one write ({} KV)",
        store.name()
    );
}

/// With bf16 weights loaded, the tensor-core attention also writes its output as `round_bf16`
/// makes it, for the o projection: a linear after it gives the bits of a fresh rounding — for a
/// decode row alone and two of two lanes (their contexts split, the last block folding the
/// splits) and for 257 rows in prefill-like chunks (walked).
#[test]
fn attentions_rounded_copy_gives_the_bits_of_rounding_again() {
    let Some(b) = device::backend("attention + linear") else { return };
    let mut rng = Rng::new(device::seed() ^ 0xa7b0);
    let (lanes, spec, lens) = lanes_and_spec();
    let (heads, width) = (9, spec.num_kv_heads * spec.head_dim);
    let cols = heads * spec.head_dim;
    let w = weight(&b, &mut rng, GgmlType::BF16, 40, cols);
    let total: usize = lens.iter().sum();
    let k = activations(&mut rng, total, width, Spread::Normal);
    let v = activations(&mut rng, total, width, Spread::DynamicRange);
    for store in [KvStore::F16, KvStore::Bf16] {
        b.set_kv_store(store);
        let kv = filled_cache(&b, &k, &v, &lanes, &spec, &lens, &|_| total);
        let many: Vec<(usize, usize)> = (0..257).map(|i| (i % 3, rng.below(lens[i % 3]))).collect();
        for rows in [vec![(0, 2099)], vec![(1, 699), (2, 68)], many] {
            let mut batch = ForwardBatch { block_size: spec.block_size, lanes: lanes.clone(), ..Default::default() };
            for &(lane, pos) in &rows {
                batch.push_row(lane, 0, pos);
            }
            let m = rows.len();
            let q: Vec<f32> = activations(&mut rng, m, cols, Spread::Normal).iter().map(|x| x * 0.3).collect();
            let mut att = b.tensor(m, cols);
            b.attention(&b.upload(&q, m, cols), &kv, 0, &batch, heads, 0.125, &mut att);
            assert!(b.download(&att).iter().all(|x| x.is_finite()), "attention ({} KV): non-finite", store.name());
            let (mut got, mut want) = (b.tensor(m, 40), b.tensor(m, 40));
            b.linear(&att, &w, &mut got);
            b.linear(&b.upload(&b.download(&att), m, cols), &w, &mut want);
            assert_same_bits(&b.download(&got), &b.download(&want), &|| {
                format!("o projection after attention ({} KV, {m} rows) against a fresh rounding,", store.name())
            });
        }
    }
    eprintln!("attention's rounded copy gives the bits of a fresh rounding");
}

/// Prefill chunks: consecutive rows of one lane share their KV tiles in one block (and walk
/// them in several passes when a group has more than 16 heads). Each row of chunks of every
/// lane, batched together, equals the row alone — for query groups of 3, 4 and 18 heads.
#[test]
fn attention_of_prefill_chunks_equals_each_row_alone() {
    on_every_store(prefill_chunk_rows_equal_alone);
}

fn prefill_chunk_rows_equal_alone(b: &CudaBackend, store: KvStore) {
    // Every head size of the tensor-core kernels (the wgmma P·V is one instruction per size).
    for head_dim in [64, 96, 128] {
        prefill_chunk_rows_equal_alone_at(b, store, head_dim);
    }
}

fn prefill_chunk_rows_equal_alone_at(b: &CudaBackend, store: KvStore, head_dim: usize) {
    let mut rng = Rng::new(device::seed() ^ 0xa77e ^ head_dim as u64);
    let lens = [2100usize, 700, 69];
    let (lanes, spec) = scrambled_lanes(&lens, 16, 37, 3, head_dim);
    let total: usize = lens.iter().sum();
    let width = spec.num_kv_heads * spec.head_dim;
    let k = activations(&mut rng, total, width, Spread::Normal);
    let v = activations(&mut rng, total, width, Spread::DynamicRange);
    let kv = filled_cache(b, &k, &v, &lanes, &spec, &lens, &|_| total);
    // Chunks crossing tile and split edges, then a decode row of each lane.
    let chunks: [(usize, std::ops::Range<usize>); 6] =
        [(0, 1000..1090), (1, 0..130), (0, 2040..2100), (2, 5..69), (1, 699..700), (0, 63..66)];
    for heads in [9, 12, 54] {
        let cols = heads * spec.head_dim;
        let mut batch = ForwardBatch { block_size: spec.block_size, lanes: lanes.clone(), ..Default::default() };
        for (lane, range) in &chunks {
            for pos in range.clone() {
                batch.push_row(*lane, 0, pos);
            }
        }
        let m = batch.num_rows();
        let q: Vec<f32> = activations(&mut rng, m, cols, Spread::Normal).iter().map(|x| x * 0.3).collect();
        let mut out = b.tensor(m, cols);
        let launches = b.attention_wgmma_launches();
        b.attention(&b.upload(&q, m, cols), &kv, 0, &batch, heads, 0.125, &mut out);
        let all = b.download(&out);
        // Where the device has the warpgroup MMA, the chunks ran on it; mma.sync gives the same bits.
        assert!(all.iter().all(|x| x.is_finite()), "attention ({} KV): non-finite prefill output", store.name());
        if wgmma_on(b) && store != KvStore::F32 {
            assert!(b.attention_wgmma_launches() > launches, "prefill chunks did not take the warpgroup MMA");
            b.set_attention_wgmma(false);
            let mut sync = b.tensor(m, cols);
            b.attention(&b.upload(&q, m, cols), &kv, 0, &batch, heads, 0.125, &mut sync);
            b.set_attention_wgmma(true);
            assert_same_bits(&all, &b.download(&sync), &|| {
                format!(
                    "attention ({} KV), {heads} heads of {head_dim}: prefill chunks, wgmma against mma.sync,",
                    store.name()
                )
            });
        }
        for r in (0..m).step_by(7).chain([m - 1]) {
            let mut one = ForwardBatch { block_size: spec.block_size, lanes: lanes.clone(), ..Default::default() };
            one.push_row(batch.row_lane[r] as usize, 0, batch.positions[r] as usize);
            let mut alone = b.tensor(1, cols);
            b.attention(&b.upload(&q[r * cols..(r + 1) * cols], 1, cols), &kv, 0, &one, heads, 0.125, &mut alone);
            let alone = b.download(&alone);
            let got = &all[r * cols..(r + 1) * cols];
            assert_same_bits(got, &alone, &|| {
                format!(
                    "attention ({} KV), {heads} heads of {head_dim}: row {r} of the chunks, against the row alone,",
                    store.name()
                )
            });
        }
    }
    eprintln!("attention ({} KV, heads of {head_dim}): rows of prefill chunks equal their solo runs", store.name());
}

/// Decode rows of many lanes, a row each, as a serving step has them: enough (row, KV head) pairs
/// that the tensor-core kernel runs one-warp blocks (walking every context, or with the contexts
/// split when the blocks would not fill the device), for GQA groups of 4 and 16 at the 8B's head
/// size. Each row equals the row alone (a 4-warp block per KV head, its context split).
#[test]
fn decode_rows_of_many_lanes_equal_each_row_alone() {
    on_every_store(decode_rows_equal_alone);
}

fn decode_rows_equal_alone(b: &CudaBackend, store: KvStore) {
    let mut rng = Rng::new(device::seed() ^ 0xdec0);
    let block = 16;
    // Contexts at tile and split edges first, then anywhere up to 800 positions.
    let edges = [1usize, 2, 64, 65, 256, 257, 512, 513, 768, 769];
    let lens: Vec<usize> = (0..200).map(|i| edges.get(i).copied().unwrap_or_else(|| 1 + rng.below(800))).collect();
    let (lanes, spec) = scrambled_lanes(&lens, block, 61, 2, 128);
    let total: usize = lens.iter().sum();
    let width = spec.num_kv_heads * spec.head_dim;
    let k = activations(&mut rng, total, width, Spread::Normal);
    let v = activations(&mut rng, total, width, Spread::DynamicRange);
    let kv = filled_cache(b, &k, &v, &lanes, &spec, &lens, &|_| total);
    // 200 rows × 2 KV heads walk; 100 rows split their contexts (fewer blocks than fill the device).
    for (heads, rows) in [(8, 200), (8, 100), (32, 200)] {
        let cols = heads * spec.head_dim;
        let mut batch = ForwardBatch { block_size: block, lanes: lanes.clone(), ..Default::default() };
        for (lane, len) in lens.iter().enumerate().take(rows) {
            batch.push_row(lane, 0, len - 1);
        }
        let q: Vec<f32> = activations(&mut rng, rows, cols, Spread::Normal).iter().map(|x| x * 0.3).collect();
        let mut out = b.tensor(rows, cols);
        b.attention(&b.upload(&q, rows, cols), &kv, 0, &batch, heads, 0.125, &mut out);
        let all = b.download(&out);
        assert!(all.iter().all(|x| x.is_finite()), "decode attention ({} KV): non-finite output", store.name());
        for r in 0..rows {
            let mut one = ForwardBatch { block_size: block, lanes: lanes.clone(), ..Default::default() };
            one.push_row(r, 0, lens[r] - 1);
            let mut alone = b.tensor(1, cols);
            b.attention(&b.upload(&q[r * cols..(r + 1) * cols], 1, cols), &kv, 0, &one, heads, 0.125, &mut alone);
            let alone = b.download(&alone);
            let got = &all[r * cols..(r + 1) * cols];
            assert_same_bits(got, &alone, &|| {
                format!(
                    "decode attention ({} KV), {heads} heads, {rows} rows: row {r} (context {}), against the row alone,",
                    store.name(),
                    lens[r]
                )
            });
        }
    }
    eprintln!("decode attention ({} KV): rows of many lanes equal their solo runs", store.name());
}
