//! The conformance suite on the CUDA backend: every op and weight format against the float64
//! reference (`plumb_verify::conformance`, the same generic body the CPU backend runs).

#[path = "support/device.rs"]
mod device;

use plumb_core::{GgmlType, OPS};
use plumb_verify::conformance::run_suite;

#[test]
fn cuda_backend_passes_every_conformance_case() {
    let Some(backend) = device::backend("conformance") else { return };
    let results = run_suite(&backend, device::seed());
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
    let failing: Vec<String> = results
        .iter()
        .filter(|r| !r.pass)
        .map(|r| format!("{} [{}]: {:.3e} > {:.3e}", r.op, r.variant, r.error, r.bound))
        .collect();
    assert!(failing.is_empty(), "{failing:#?}");
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
