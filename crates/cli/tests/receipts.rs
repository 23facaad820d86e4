//! Receipts prove something only if they can be re-derived. These tests take the committed gate
//! receipt, check its figures against its digest and its verdict against its own numbers, and
//! re-run `plumb check --quick`, whose two controls must reproduce the committed figures for
//! those controls exactly (the gate is deterministic and bit-identical across instruction sets).

use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn load(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn digest(figures: &Value) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(figures.to_string().as_bytes()))
}

#[test]
fn committed_check_receipt_is_consistent_with_its_own_figures() {
    let r = load(&root().join("receipts/check-cpu-smollm2.json"));
    assert_eq!(r["figures_sha256"].as_str().unwrap(), digest(&r["figures"]), "figures were edited after the run");
    assert_eq!(r["build"]["dirty"], "false", "the receipt must come from a clean build");
    let f = &r["figures"];
    let gate = &f["gate"];
    let (mult, allow) =
        (gate["bound"]["floor_multiple"].as_f64().unwrap(), gate["bound"]["abs_allowance"].as_f64().unwrap());
    let within = |x: &str, floor: &str| gate[x].as_f64().unwrap() <= mult * gate[floor].as_f64().unwrap() + allow;
    let controls = gate["controls"].as_array().unwrap();
    let recomputed_gate = within("nrms_mean", "floor_mean")
        && within("nrms_worst", "floor_worst")
        && controls
            .iter()
            .all(|c| c["greedy_agrees"] == true && c["invariant"] == true && c["lanes_invariant"] == true);
    let conformance = f["conformance"].as_array().unwrap();
    let recomputed_conf = conformance.iter().all(|c| c["error"].as_f64().unwrap() <= c["bound"].as_f64().unwrap());
    let residency = &f["residency"];
    let recomputed_res =
        residency["file_bytes_read"] == 0 && residency["storage_bytes_read"] == 0 && residency["major_faults"] == 0;
    assert_eq!(gate["pass"].as_bool(), Some(recomputed_gate), "the gate's verdict disagrees with its numbers");
    let outside = &f["outside_reference"];
    let recomputed_outside = outside.is_null()
        || outside["prompts"].as_array().unwrap().iter().all(|p| {
            p["reference_nrms_max"].as_f64().unwrap() <= outside["reference_bound"].as_f64().unwrap()
                && p["reference_greedy_agrees"] == true
        });
    assert!(!outside.is_null(), "the default model's check compares with transformers' fixtures");
    assert_eq!(f["pass"].as_bool(), Some(recomputed_gate && recomputed_conf && recomputed_res && recomputed_outside));
    assert_eq!(f["pass"], true);
    assert_eq!(controls.len(), 9, "the full gate has 8 prompts and the long control");
}

#[test]
fn quick_check_reproduces_the_committed_figures_for_its_controls() {
    let committed = load(&root().join("receipts/check-cpu-smollm2.json"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("quick.json");
    let run = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["check", "--quick", "--receipt", out.to_str().unwrap()])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let fresh = load(&out);
    assert_eq!(fresh["figures_sha256"].as_str().unwrap(), digest(&fresh["figures"]));
    assert_eq!(fresh["argv"][1], "check");
    assert_eq!(fresh["build"]["commit"].as_str().unwrap().len(), 40);
    let quick = fresh["figures"]["gate"]["controls"].as_array().unwrap();
    let full = committed["figures"]["gate"]["controls"].as_array().unwrap();
    assert_eq!(quick.len(), 2);
    assert_eq!(fresh["figures"]["outside_reference"]["pass"], true, "{}", fresh["figures"]["outside_reference"]);
    for q in quick {
        let c = full.iter().find(|c| c["name"] == q["name"]).expect("the committed receipt has the control");
        for key in [
            "prompt_len",
            "gen_len",
            "nrms_mean",
            "nrms_max",
            "nrms_max_position",
            "floor_mean",
            "floor_max",
            "greedy_agrees",
            "near_ties",
            "invariant",
        ] {
            assert_eq!(q[key], c[key], "{}: `{key}` differs from the committed receipt", q["name"]);
        }
    }
}
