//! The conformance suite on the CUDA backend: every op and weight format against the float64
//! reference (`plumb_verify::conformance`, the same generic body the CPU backend runs).

#[path = "support/device.rs"]
mod device;

use plumb_core::{GgmlType, KvStore, OPS};
use plumb_verify::conformance::{CaseResult, run_suite};

#[test]
fn cuda_backend_passes_every_conformance_case() {
    let Some(backend) = device::backend("conformance") else { return };
    let results = run_suite(&backend, device::seed());
    report(&results);
    for op in OPS {
        assert!(results.iter().any(|r| r.op == op), "op `{op}` has no conformance case");
    }
    // Every format plumb dequantizes has CUDA kernels, so every one was exercised.
    for ty in GgmlType::DEQUANTIZABLE {
        assert!(
            results.iter().any(|r| r.op == "linear" && r.variant.starts_with(&format!("{ty} "))),
            "no linear case for {ty}"
        );
    }
}

/// With a 16-bit KV store attention runs on the tensor cores (q and the softmax weights enter
/// as sums of 16-bit pieces): it must meet attention's float32 bound all the same, against the
/// reference storing K/V the same way.
#[test]
fn tensor_core_attention_meets_the_float32_bound() {
    let Some(backend) = device::backend("conformance, 16-bit KV") else { return };
    for store in [KvStore::F16, KvStore::Bf16] {
        backend.set_kv_store(store);
        eprintln!("-- {} KV store", store.name());
        report(&run_suite(&backend, device::seed()));
    }
}

fn report(results: &[CaseResult]) {
    for r in results {
        eprintln!(
            "{:<12} {:<48} {:.3e} ≤ {:.3e} {}",
            r.op,
            r.variant,
            r.error,
            r.bound,
            if r.pass { "ok" } else { "FAIL" }
        );
    }
    let failing: Vec<String> = results
        .iter()
        .filter(|r| !r.pass)
        .map(|r| format!("{} [{}]: {:.3e} > {:.3e}", r.op, r.variant, r.error, r.bound))
        .collect();
    assert!(failing.is_empty(), "{failing:#?}");
}
