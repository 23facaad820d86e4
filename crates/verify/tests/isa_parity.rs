//! AVX-512, AVX2 and scalar kernels give identical bits for every op — not only dequantization —
//! including partial tiles (output counts that are not a multiple of the tile), rows not a multiple
//! of the micro-kernel, column counts that are not a multiple of 16, GQA attention over several
//! blocks, and `linear_multi` against `linear`. Runs on every instruction set this CPU has.
//! Also: every intrinsic of those kernels inlines into its `#[target_feature]` entry point.

#[path = "support/elf.rs"]
mod elf;

use plumb_backend_cpu::{CpuBackend, CpuTensor, Isa};
use plumb_core::*;
use plumb_verify::inputs::{Rng, Spread, activations, weight_bytes};

fn backends() -> Vec<CpuBackend> {
    let isas = Isa::available();
    eprintln!("instruction sets on this CPU: {isas:?}");
    isas.into_iter().map(|isa| CpuBackend::with_isa(2, isa)).collect()
}

fn weight(b: &CpuBackend, ty: GgmlType, rows: usize, cols: usize, seed: u64) -> plumb_backend_cpu::CpuWeight {
    let bytes = HostBytes::from_vec(weight_bytes(&mut Rng::new(seed), ty, rows, cols));
    b.load_weight(WeightSource { name: format!("{ty} {rows}x{cols}"), ty, rows, cols, bytes }).unwrap()
}

fn bits(t: &CpuTensor) -> Vec<u32> {
    t.data.iter().map(|v| v.to_bits()).collect()
}

/// Asserts every backend's output equals the first one's, bit for bit.
fn same_on_every_isa(what: &str, bs: &[CpuBackend], f: impl Fn(&CpuBackend) -> Vec<u32>) {
    let want = f(&bs[0]);
    for b in &bs[1..] {
        let got = f(b);
        let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert!(
            differ == 0 && got.len() == want.len(),
            "{what}: {:?} differs from {:?} in {differ} elements",
            b.isa(),
            bs[0].isa()
        );
    }
}

#[test]
fn linear_and_embed_are_identical_on_every_isa() {
    let bs = backends();
    let k = 256;
    for ty in GgmlType::DEQUANTIZABLE {
        for m in [8, 13, 40] {
            for rows in [1, 2, 3, 4, 5, 63, 64, 65, 130] {
                let x = activations(&mut Rng::new(rows as u64), rows, k, Spread::DynamicRange);
                same_on_every_isa(&format!("linear {ty} {rows}x{k}·{m}x{k}"), &bs, |b| {
                    let w = weight(b, ty, m, k, ty.id() as u64 * 100 + m as u64);
                    let mut out = b.tensor(rows, m);
                    b.linear(&b.upload(&x, rows, k), &w, &mut out);
                    bits(&out)
                });
            }
        }
        same_on_every_isa(&format!("embed {ty}"), &bs, |b| {
            let w = weight(b, ty, 50, k, 7);
            let mut out = b.tensor(4, k);
            b.embed(&[3, 49, 0, 3], &w, &mut out);
            bits(&out)
        });
    }
}

#[test]
fn linear_multi_equals_linear_bit_for_bit() {
    for b in backends() {
        let k = 256;
        let specs = [(GgmlType::Q4_1, 24), (GgmlType::Q8_0, 13), (GgmlType::F16, 16), (GgmlType::Q4_K, 9)];
        let ws: Vec<_> = specs.iter().enumerate().map(|(i, &(ty, m))| weight(&b, ty, m, k, i as u64)).collect();
        for rows in [1, 3, 5, 64, 70] {
            let x = b.upload(&activations(&mut Rng::new(9), rows, k, Spread::Normal), rows, k);
            let mut multi: Vec<CpuTensor> = ws.iter().map(|w| b.tensor(rows, w.rows)).collect();
            let mut outs: Vec<&mut CpuTensor> = multi.iter_mut().collect();
            b.linear_multi(&x, &ws.iter().collect::<Vec<_>>(), &mut outs);
            for (w, got) in ws.iter().zip(&multi) {
                let mut want = b.tensor(rows, w.rows);
                b.linear(&x, w, &mut want);
                assert_eq!(
                    bits(got),
                    bits(&want),
                    "{:?}: linear_multi differs from linear for {} at {rows} rows",
                    b.isa(),
                    w.name
                );
            }
        }
    }
}

#[test]
fn elementwise_ops_are_identical_on_every_isa() {
    let bs = backends();
    for (rows, cols) in [(1, 576), (13, 100), (9, 37)] {
        let x = activations(&mut Rng::new(cols as u64), rows, cols, Spread::DynamicRange);
        let y = activations(&mut Rng::new(cols as u64 + 1), rows, cols, Spread::Normal);
        let g: Vec<f32> = y.iter().map(|v| v * 6.0).collect();
        let norm: Vec<u8> = (0..cols).flat_map(|i| (1.0 + 0.01 * i as f32).to_le_bytes()).collect();
        same_on_every_isa(&format!("rms_norm {rows}x{cols}"), &bs, |b| {
            let src = WeightSource {
                name: "norm".into(),
                ty: GgmlType::F32,
                rows: 1,
                cols,
                bytes: HostBytes::from_vec(norm.clone()),
            };
            let w = b.load_weight(src).unwrap();
            let mut out = b.tensor(rows, cols);
            b.rms_norm(&b.upload(&x, rows, cols), &w, 1e-5, &mut out);
            bits(&out)
        });
        same_on_every_isa(&format!("silu_mul {rows}x{cols}"), &bs, |b| {
            let mut out = b.tensor(rows, cols);
            b.silu_mul(&b.upload(&g, rows, cols), &b.upload(&y, rows, cols), &mut out);
            bits(&out)
        });
        same_on_every_isa(&format!("add {rows}x{cols}"), &bs, |b| {
            let mut acc = b.upload(&x, rows, cols);
            b.add(&mut acc, &b.upload(&y, rows, cols));
            bits(&acc)
        });
    }
    let positions = [0u32, 1, 17, 511, 4095];
    let inv_freq: Vec<f64> = (0..32).map(|i| 1.0 / 10_000f64.powf(i as f64 / 32.0)).collect();
    let x = activations(&mut Rng::new(3), positions.len(), 3 * 64, Spread::Normal);
    same_on_every_isa("rope", &bs, |b| {
        let table = b.rope_table(&positions, &inv_freq);
        let mut t = b.upload(&x, positions.len(), 3 * 64);
        b.rope(&mut t, &table, 3, 64);
        bits(&t)
    });
}

#[test]
fn attention_is_identical_on_every_isa() {
    for store in [KvStore::F32, KvStore::F16, KvStore::Bf16] {
        let bs: Vec<CpuBackend> = backends().into_iter().map(|b| b.with_kv_store(store)).collect();
        attention_same_on(&bs, store);
    }
}

fn attention_same_on(bs: &[CpuBackend], store: KvStore) {
    let (heads, kv_heads, block) = (6, 2, 4);
    for d in [16, 64, 128] {
        let spec = KvSpec {
            num_layers: 1,
            num_kv_heads: kv_heads,
            head_dim: d,
            block_size: block,
            num_blocks: 24,
            lane_state: plumb_core::LaneStateSpec::NONE,
        };
        let lanes = vec![LaneView { block_table: vec![5, 1, 9] }, LaneView { block_table: (10..24).collect() }];
        let mut history = ForwardBatch { block_size: block, lanes: lanes.clone(), ..Default::default() };
        for (lane, len) in [(0usize, 9usize), (1, 53)] {
            for pos in 0..len {
                history.push_row(lane, 0, pos);
            }
        }
        let n = history.num_rows();
        let k = activations(&mut Rng::new(1), n, kv_heads * d, Spread::Normal);
        let v = activations(&mut Rng::new(2), n, kv_heads * d, Spread::DynamicRange);
        let mut batch = ForwardBatch { block_size: block, lanes, ..Default::default() };
        for (lane, pos) in [(0, 0), (0, 4), (0, 8), (1, 15), (1, 16), (1, 17), (1, 52)] {
            batch.push_row(lane, 0, pos);
        }
        let rows = batch.num_rows();
        let q = activations(&mut Rng::new(3), rows, heads * d, Spread::Normal);
        same_on_every_isa(&format!("attention head_dim {d}, {} KV", store.name()), bs, |b| {
            let mut kv = b.new_kv_cache(&spec);
            b.write_kv(&mut kv, 0, &b.upload(&k, n, kv_heads * d), &b.upload(&v, n, kv_heads * d), &history);
            let mut out = b.tensor(rows, heads * d);
            b.attention(&b.upload(&q, rows, heads * d), &kv, 0, &batch, heads, 0.125, &mut out);
            bits(&out)
        });
    }
}

/// Q8 activations (`--act-dtype q8`): the VNNI kernel and the portable one give the same bits,
/// every row equals the row alone, and a non-finite input reaches its own row's outputs only.
/// K covers full 16-block groups and padded tail groups of 1, 2, 4 and 8 blocks.
#[test]
fn q8_linear_is_identical_on_every_isa_and_every_row_equals_the_row_alone() {
    let bs: Vec<CpuBackend> = backends().into_iter().map(|b| b.with_q8_inputs(true)).collect();
    eprintln!("q8 on VNNI: {:?}", bs.iter().map(|b| b.q8_on_vnni()).collect::<Vec<_>>());
    let types = [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0];
    let k_types = [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];
    let cases = types.iter().flat_map(|&ty| [32, 64, 96, 544, 576, 1536].map(|k| (ty, k)));
    for (ty, k) in cases.chain(k_types.iter().flat_map(|&ty| [256, 768, 1280].map(|k| (ty, k)))) {
        assert_eq!(bs[0].linear_inputs(ty, k), LinearInputs::Q8, "{ty} K={k}");
        for m in [1, 13] {
            let rows = 9;
            let x = activations(&mut Rng::new((k + m) as u64), rows, k, Spread::DynamicRange);
            same_on_every_isa(&format!("q8 linear {ty} {rows}x{k}·{m}x{k}"), &bs, |b| {
                let w = weight(b, ty, m, k, ty.id() as u64 * 100 + m as u64);
                let mut out = b.tensor(rows, m);
                b.linear(&b.upload(&x, rows, k), &w, &mut out);
                for r in 0..rows {
                    let mut alone = b.tensor(1, m);
                    b.linear(&b.upload(&x[r * k..(r + 1) * k], 1, k), &w, &mut alone);
                    assert_eq!(bits(&alone), bits(&out)[r * m..(r + 1) * m], "{ty} K={k}: row {r} of {rows} alone");
                }
                bits(&out)
            });
        }
    }
    let b = &bs[0];
    let (k, m) = (576, 5);
    let w = weight(b, GgmlType::Q4_1, m, k, 3);
    let mut x = activations(&mut Rng::new(4), 3, k, Spread::Normal);
    x[k + 100] = f32::NAN;
    let mut out = b.tensor(3, m);
    b.linear(&b.upload(&x, 3, k), &w, &mut out);
    assert!(out.data[m..2 * m].iter().all(|v| v.is_nan()), "{:?}", &out.data[m..2 * m]);
    assert!(out.data[..m].iter().chain(&out.data[2 * m..]).all(|v| v.is_finite()));
}

/// A helper reached from a `#[target_feature]` kernel but compiled without its features (a trait's
/// default method or a generic function without `#[inline(always)]`) cannot inline the
/// intrinsics it calls: each `_mm256_*` becomes a call, the same bits four times slower (AVX2
/// Q4_1 decode of the default model: 22.4 against 89.0 tokens/s once the `F32x16` defaults were
/// inlined). This binary links the kernels above, compiled as in release (backend-cpu builds at
/// opt-level 3 in tests), so its own symbol table shows any intrinsic left out of line.
#[test]
fn no_kernel_intrinsic_is_compiled_as_a_call() {
    assert!(elf::is_out_of_line_intrinsic("_ZN4core9core_arch3x863avx18__mm256_cvtepi32_ps17h0123456789abcdefE"));
    assert!(elf::is_out_of_line_intrinsic("_RNvNtNtNtCsgEmfK2I1SDS_4core9core_arch3x864avx216__mm256_and_si256"));
    assert!(!elf::is_out_of_line_intrinsic("_ZN4core9core_arch3x866xsave7_xgetbv17h0123456789abcdefE"));
    assert!(!elf::is_out_of_line_intrinsic("_RNvNtNtNtCsgEmfK2I1SDS_4core9core_arch3x863avx16__mm256_storeu_ps"));
    let exe = std::env::current_exe().expect("the test binary's path");
    let bytes = std::fs::read(&exe).expect("the test binary reads");
    let Some(names) = elf::function_symbols(&bytes) else {
        eprintln!("skipped: {} is not an ELF64 file with a symbol table", exe.display());
        return;
    };
    // The scan proves something only where the kernels' AVX2 entry points were linked in.
    let entries: Vec<&String> = names.iter().filter(|n| n.contains("with_avx2")).collect();
    assert!(
        entries.len() >= 6 && entries.iter().any(|n| n.contains("linear_part")),
        "AVX2 entry points in {}: {entries:?}; without the linear kernel's the scan would prove little",
        exe.display()
    );
    let mut calls: Vec<&String> = names.iter().filter(|n| elf::is_out_of_line_intrinsic(n)).collect();
    calls.sort();
    calls.dedup();
    assert!(
        calls.is_empty(),
        "intrinsics compiled as calls (a helper of a #[target_feature] kernel lacks #[inline(always)]): {calls:#?}"
    );
}
