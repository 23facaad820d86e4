//! The gates pass on the CPU backend and fail — naming the problem — on injected faults.

#[path = "support/faulty.rs"]
mod faulty;
#[path = "support/tiny_model.rs"]
mod tiny_model;

use faulty::{Fault, Faulty};
use plumb_backend_cpu::CpuBackend;
use plumb_checkpoint::GgufFile;
use plumb_core::{
    Backend, COMPRESSED_ATTENTION_OPS, ForwardBatch, FullBackend, GATED_DELTA_OPS, HYPER_CONNECTION_OPS, KvStore,
    MOE_OPS, OPS, SCORED_MOE_OPS,
};
use plumb_verify::conformance::{CaseResult, run_suite};
use plumb_verify::gate::{Control, GateBound, run_gate};
use plumb_verify::residency;

/// A fresh seed per run, printed so a failure can be replayed with PLUMB_SEED.
fn seed() -> u64 {
    let seed = std::env::var("PLUMB_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("conformance seed: {seed} (replay with PLUMB_SEED={seed})");
    seed
}

fn faulty(fault: Fault) -> Faulty {
    Faulty { inner: CpuBackend::new(1).with_q8_inputs(matches!(fault, Fault::Q8Inputs(_))), fault }
}

fn failing(results: &[CaseResult]) -> Vec<String> {
    results
        .iter()
        .filter(|r| !r.pass)
        .map(|r| format!("{} [{}]: {:.3e} > {:.3e}", r.op, r.variant, r.error, r.bound))
        .collect()
}

#[test]
fn cpu_backend_passes_every_conformance_case_on_every_isa() {
    for isa in plumb_backend_cpu::Isa::available() {
        eprintln!("== {isa:?} ==");
        check_conformance(&CpuBackend::with_isa(2, isa));
    }
}

/// A 16-bit KV cache on the CPU is a declared precision: conformance holds it to the reference
/// with the same store, and the whole-model gate passes at its own floor, above plain f32's.
#[test]
fn cpu_backend_with_a_16_bit_kv_cache_passes_at_its_declared_precision() {
    let path = tiny_model::write(7);
    let file = GgufFile::open(&path).unwrap();
    let plain = run_gate(&file, &CpuBackend::new(1), &controls(), BOUND, 1).unwrap();
    for store in [KvStore::F16, KvStore::Bf16] {
        let backend = CpuBackend::new(2).with_kv_store(store);
        eprintln!("== {} KV ==", store.name());
        check_conformance(&backend);
        let report = run_gate(&file, &backend, &controls(), BOUND, 1).unwrap();
        assert!(report.pass, "{store:?}: {:#?}", report.failures);
        assert!(
            report.floor_mean > 10.0 * plain.floor_mean,
            "{store:?}: {} vs {}",
            report.floor_mean,
            plain.floor_mean
        );
    }
    std::fs::remove_file(path).unwrap();
}

fn check_conformance(backend: &CpuBackend) {
    let results = run_suite(backend, seed());
    for r in &results {
        eprintln!(
            "{:<12} {:<48} {:.3e} ≤ {:.3e} {}",
            r.op,
            r.variant,
            r.error,
            r.bound,
            if r.pass { "ok" } else { "FAIL" }
        );
    }
    assert!(failing(&results).is_empty(), "{:#?}", failing(&results));
    // The CPU backend has the optional MoE, Gated DeltaNet and DeepSeek V4 groups, so their ops
    // must have cases too.
    assert!(backend.moe_ops().is_some() && backend.gated_delta_ops().is_some());
    assert!(
        backend.compressed_attention_ops().is_some()
            && backend.hyper_connection_ops().is_some()
            && backend.scored_moe_ops().is_some()
    );
    let ops: Vec<&str> = OPS
        .iter()
        .chain(&MOE_OPS)
        .chain(&GATED_DELTA_OPS)
        .chain(&COMPRESSED_ATTENTION_OPS)
        .chain(&HYPER_CONNECTION_OPS)
        .chain(&SCORED_MOE_OPS)
        .copied()
        .collect();
    for op in &ops {
        assert!(results.iter().any(|r| r.op == *op), "op `{op}` has no conformance case");
    }
    assert!(results.iter().all(|r| ops.contains(&r.op)), "a case names an op missing from plumb_core::OPS");
}

#[test]
fn conformance_names_injected_faults() {
    let rope = failing(&run_suite(&faulty(Fault::RopeOffByOne), seed()));
    assert!(rope.iter().any(|f| f.starts_with("rope_table")), "{rope:?}");
    let scale = failing(&run_suite(&faulty(Fault::DroppedBlockScale), seed()));
    assert!(scale.iter().any(|f| f.starts_with("linear [Q4_1")), "{scale:?}");
    assert!(scale.iter().any(|f| f.starts_with("linear [Q8_0")), "{scale:?}");
}

fn controls() -> Vec<Control> {
    (0..3)
        .map(|i| Control { name: format!("control {i}"), prompt: vec![1 + i, 5, 9, 3 * i + 7], gen_len: 12 })
        .collect()
}

const BOUND: GateBound = GateBound { floor_multiple: 4.0, abs_allowance: 0.0, near_tie: 1e-3 };

#[test]
fn whole_model_gate_passes_on_cpu_and_fails_on_faults() {
    let path = tiny_model::write(7);
    let file = GgufFile::open(&path).unwrap();
    let good = run_gate(&file, &CpuBackend::new(1), &controls(), BOUND, 1).unwrap();
    assert!(good.pass, "{:#?}", good.failures);
    assert!(good.floor_mean > 0.0 && good.nrms_mean > 0.0);

    let rope = run_gate(&file, &faulty(Fault::RopeOffByOne), &controls(), BOUND, 1).unwrap();
    assert!(!rope.pass);
    assert!(rope.failures.iter().any(|f| f.contains("logits NRMS vs float64")), "{:#?}", rope.failures);

    let order = run_gate(&file, &faulty(Fault::SummationOrderDependsOnBatch), &controls(), BOUND, 1).unwrap();
    assert!(order.failures.iter().any(|f| f.contains("batch invariance broken")), "{:#?}", order.failures);
    std::fs::remove_file(path).unwrap();
}

/// A rounding the backend declares passes the gate at its own floor (at least `floor_factor`
/// above plain float32's) and conformance; the same rounding left undeclared fails the gate's
/// NRMS and a conformance case whose op name starts with `op`.
fn declared_precision_is_gated(declared: Fault, silent: Fault, floor_factor: f64, op: &str) {
    let path = tiny_model::write(7);
    let file = GgufFile::open(&path).unwrap();
    let plain = run_gate(&file, &CpuBackend::new(1), &controls(), BOUND, 1).unwrap();
    let report = run_gate(&file, &faulty(declared), &controls(), BOUND, 1).unwrap();
    assert!(report.pass, "{declared:?}: {:#?}", report.failures);
    assert!(report.floor_mean > floor_factor * plain.floor_mean, "{} vs {}", report.floor_mean, plain.floor_mean);
    let report = run_gate(&file, &faulty(silent), &controls(), BOUND, 1).unwrap();
    assert!(!report.pass, "{silent:?}: an undeclared precision loss must fail");
    assert!(report.failures.iter().any(|f| f.contains("logits NRMS vs float64")), "{:#?}", report.failures);
    assert!(failing(&run_suite(&faulty(declared), seed())).is_empty());
    let undeclared = failing(&run_suite(&faulty(silent), seed()));
    assert!(undeclared.iter().any(|f| f.starts_with(op)), "{undeclared:#?}");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_declared_bf16_input_precision_is_gated_at_its_own_floor_and_an_undeclared_one_fails() {
    // The floor is float32 with bf16 activations: far above plain float32's.
    declared_precision_is_gated(Fault::Bf16Inputs(true), Fault::Bf16Inputs(false), 100.0, "linear [");
}

#[test]
fn declared_q8_inputs_are_gated_at_their_own_floor_and_undeclared_ones_fail() {
    // The floor is float32 with Q8 activation blocks: far above plain float32's.
    declared_precision_is_gated(Fault::Q8Inputs(true), Fault::Q8Inputs(false), 100.0, "linear [");
}

/// Q8 activations pass conformance on every instruction set (VNNI and portable kernels).
#[test]
fn cpu_backend_with_q8_inputs_passes_every_conformance_case_on_every_isa() {
    for isa in plumb_backend_cpu::Isa::available() {
        let backend = CpuBackend::with_isa(2, isa).with_q8_inputs(true);
        eprintln!("== {isa:?}, q8 on VNNI: {} ==", backend.q8_on_vnni());
        check_conformance(&backend);
    }
}

#[test]
fn a_declared_f16_kv_cache_is_gated_at_its_own_floor_and_an_undeclared_one_fails() {
    // The floor stores K and V in f16; conformance sees it in the round trip through the cache.
    declared_precision_is_gated(Fault::F16Kv(true), Fault::F16Kv(false), 10.0, "write_kv");
}

#[test]
fn gate_fails_on_non_finite_values_and_names_the_position() {
    let path = tiny_model::write(7);
    let file = GgufFile::open(&path).unwrap();
    let nan = run_gate(&file, &faulty(Fault::NanAtPosition(6)), &controls(), BOUND, 1).unwrap();
    assert!(!nan.pass, "a NaN must fail the gate");
    // The CPU's exp clamps its input with max/min, which drops a NaN score, so the logits may
    // stay finite: the intermediate check is what must catch it.
    assert!(
        nan.failures.iter().any(|f| f.contains("intermediate `q_rope` of layer 0 holds NaN or infinity at position 6")),
        "{:#?}",
        nan.failures
    );
    std::fs::remove_file(path).unwrap();
}

#[test]
fn greedy_mismatches_fail_unless_they_are_near_ties() {
    let path = tiny_model::write(7);
    let file = GgufFile::open(&path).unwrap();
    let strict = run_gate(&file, &faulty(Fault::PromoteRunnerUp), &controls(), BOUND, 1).unwrap();
    let argmax_failures = strict.failures.iter().filter(|f| f.contains("teacher-forced argmax")).count();
    assert!(argmax_failures > 0, "the fault should change some greedy choice: {:#?}", strict.failures);
    let lenient = GateBound { near_tie: f64::INFINITY, ..BOUND };
    let tied = run_gate(&file, &faulty(Fault::PromoteRunnerUp), &controls(), lenient, 1).unwrap();
    assert!(tied.failures.iter().all(|f| !f.contains("teacher-forced argmax") && !f.contains("greedy continuation")));
    assert_eq!(tied.near_ties, argmax_failures, "every mismatch is counted as a near-tie");
    assert!(!tied.pass, "the NRMS bound still fails the fault");
    assert!(tied.failures.iter().any(|f| f.contains("logits NRMS")), "{:#?}", tied.failures);
    std::fs::remove_file(path).unwrap();
}

/// Generates `n` tokens greedily on `backend` after a warm-up, measuring I/O.
fn serve<B: FullBackend + 'static>(file: &GgufFile, backend: &B, n: usize) -> residency::ResidencyReport {
    let model = plumb_models::load_model(file, backend).unwrap();
    let spec = model.kv_spec(16, 32);
    let mut kv = backend.new_kv_cache(&spec);
    let mut step = |token: u32, pos: usize| {
        let batch = ForwardBatch::single_lane(&[token], pos, 16, (0..32).collect());
        let logits = backend.download(&model.forward(backend, &batch, &mut kv, None));
        plumb_sampling_free_argmax(&logits)
    };
    let mut token = step(1, 0);
    residency::measure(n, || {
        for pos in 1..=n {
            token = step(token, pos);
        }
    })
}

fn plumb_sampling_free_argmax(v: &[f32]) -> u32 {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b }) as u32
}

#[test]
fn residency_gate_passes_on_cpu_and_catches_file_reads() {
    let path = tiny_model::write(11);
    let file = GgufFile::open(&path).unwrap();
    let good = serve(&file, &CpuBackend::new(1), 64);
    assert!(good.pass, "{:#?}", good.failures);
    let leaked: &'static str = Box::leak(path.display().to_string().into_boxed_str());
    let bad = serve(&file, &faulty(Fault::DiskReadWhileServing(leaked)), 64);
    assert!(!bad.pass);
    assert!(bad.failures.iter().any(|f| f.contains("bytes from files")), "{:#?}", bad.failures);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn ungated_family_is_refused_before_any_weight_is_read() {
    use plumb_checkpoint::MetaValue;
    use plumb_checkpoint::gguf::writer::GgufWriter;
    // Hyper-parameters only: loading any weight would fail with "missing tensor".
    let mut w = GgufWriter::new();
    for (k, v) in [("block_count", 1u32), ("context_length", 64), ("embedding_length", 64), ("feed_forward_length", 64)]
    {
        w.meta(&format!("llama.{k}"), MetaValue::U32(v));
    }
    w.meta("general.architecture", MetaValue::String("llama".into()))
        .meta("llama.attention.head_count", MetaValue::U32(4))
        .meta("llama.attention.layer_norm_rms_epsilon", MetaValue::F32(1e-5))
        .meta("llama.vocab_size", MetaValue::U32(32));
    let path = std::env::temp_dir().join(format!("plumb-ungated-{}.gguf", std::process::id()));
    std::fs::write(&path, w.to_bytes()).unwrap();
    let file = GgufFile::open(&path).unwrap();
    let ungated_kind = Faulty { inner: CpuBackend::new(1), fault: Fault::PretendKind("rocm") };
    let err = plumb_models::load_model_with(&file, &ungated_kind, Some("")).err().expect("refused").to_string();
    assert!(err.contains("has not passed its whole-model gate on the `rocm` backend"), "{err}");
    assert!(err.contains("PLUMB_EXPERIMENTAL=llama"), "{err}");
    // Opting in gets past the gate, to the weights (which this file lacks).
    let err = plumb_models::load_model_with(&file, &ungated_kind, Some("qwen2, llama"))
        .err()
        .expect("no weights")
        .to_string();
    assert!(err.contains("missing"), "{err}");
    // The gated pair loads without opting in (again failing only at the weights).
    let err =
        plumb_models::load_model_with(&file, &CpuBackend::new(1), Some("")).err().expect("no weights").to_string();
    assert!(err.contains("missing"), "{err}");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn gate_table_matches_the_committed_receipts() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (family, backend, receipt) in plumb_models::registry::GATES_PASSED {
        let text = std::fs::read_to_string(root.join(receipt)).unwrap_or_else(|_| panic!("{receipt} is missing"));
        let r: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(r["figures"]["family"], *family, "{receipt}");
        assert_eq!(r["figures"]["backend_kind"], *backend, "{receipt}");
        assert_eq!(r["figures"]["pass"], true, "{receipt} records a failing check");
        assert_eq!(r["evidence_origin"], "current_invocation");
    }
}

fn qwen3_moe_fixture() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/qwen3_moe/hf")
}

#[test]
fn gate_catches_an_moe_combine_whose_rounding_depends_on_the_batch() {
    let ckpt = plumb_checkpoint::HfCheckpoint::open(qwen3_moe_fixture()).unwrap();
    let good = run_gate(&ckpt, &CpuBackend::new(1), &controls(), BOUND, 1).unwrap();
    assert!(good.pass, "{:#?}", good.failures);
    let bad = run_gate(&ckpt, &faulty(Fault::MoeRoundingDependsOnBatch), &controls(), BOUND, 1).unwrap();
    assert!(bad.failures.iter().any(|f| f.contains("batch invariance broken")), "{:#?}", bad.failures);
}

#[test]
fn an_moe_family_is_refused_on_a_backend_without_moe_kernels_before_any_weight_is_read() {
    // The fixture's config with a weight file that holds no tensor at all: an error about
    // weights would mean the loader got that far.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(qwen3_moe_fixture().join("config.json"), dir.path().join("config.json")).unwrap();
    let header = b"{}";
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header);
    std::fs::write(dir.path().join("model.safetensors"), bytes).unwrap();
    let ckpt = plumb_checkpoint::HfCheckpoint::open(dir.path()).unwrap();
    let like_cuda = Faulty { inner: CpuBackend::new(1), fault: Fault::NoMoeOps };
    for opt_in in [Some(""), Some("qwen3_moe"), None] {
        let err = plumb_models::load_model_with(&ckpt, &like_cuda, opt_in).err().expect("refused").to_string();
        assert!(
            err.contains("has no mixture-of-experts kernels yet, which the `qwen3_moe` family needs"),
            "{opt_in:?}: {err}"
        );
    }
    // A backend with the kernels gets past that, to the (missing) weights.
    let err = plumb_models::load_model_with(&ckpt, &CpuBackend::new(1), None).err().expect("no weights").to_string();
    assert!(err.contains("missing"), "{err}");
}
