//! A Hugging Face model folder as `--model DIR` (fixtures/qwen3/hf): `inspect` reads it, `run`
//! refuses the ungated family before reading weights and runs it when opted in, and a broken
//! folder — truncated or inconsistent safetensors, a missing shard, a bad config field, an
//! unparsable tokenizer.json — fails with one clear line naming the file, never a panic.

#[path = "support/plumb.rs"]
mod support;

use std::path::{Path, PathBuf};
use support::{plumb, text};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/qwen3/hf")
}

/// A writable copy of the fixture folder.
fn copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(fixture()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    dir
}

/// `plumb run` on `dir` (opted in to the qwen3 family): its stderr, asserting it failed cleanly.
fn run_fails(dir: &Path) -> String {
    let out = plumb()
        .args(["run", "--model", dir.to_str().unwrap(), "--raw", "-n", "4", "hi"])
        .env("PLUMB_EXPERIMENTAL", "qwen3")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn inspect_and_run_a_hugging_face_folder() {
    let dir = fixture();
    let out = plumb().args(["inspect", dir.to_str().unwrap()]).output().unwrap();
    let report = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for want in ["Qwen3ForCausalLM", "Hugging Face safetensors", "pre `qwen2`", "384 tokens", "end of generation"] {
        assert!(report.contains(want), "{want:?} in {report}");
    }

    // qwen3 has passed its gate on the CPU: no opt-in needed.
    let out = plumb()
        .args(["run", "--model", dir.to_str().unwrap(), "--raw", "--temperature", "0", "-n", "8", "Hello world"])
        .env_remove("PLUMB_EXPERIMENTAL")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("8 generated"), "{}", text(&out.stderr));
}

/// `plumb run --raw -n 8 --seed 5 ARGS "Hello world"` on `dir`: the generated text.
fn generated(dir: &Path, args: &[&str]) -> String {
    let out = plumb()
        .args(["run", "--model", dir.to_str().unwrap(), "--raw", "-n", "8", "--seed", "5"])
        .args(args)
        .arg("Hello world")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn generation_config_sampling_defaults_apply_when_unset() {
    let dir = copy();
    let greedy = generated(dir.path(), &["--temperature", "0"]);
    // plumb's own defaults sample (temperature 0.8): seed 5 gives another text than greedy.
    assert_ne!(generated(dir.path(), &[]), greedy);
    // `do_sample: false` makes the model's default greedy; a flag on the command line still wins.
    edit(&dir.path().join("generation_config.json"), "\"use_cache\"", "\"do_sample\": false, \"use_cache\"");
    assert_eq!(generated(dir.path(), &[]), greedy);
    assert_ne!(generated(dir.path(), &["--temperature", "1.5"]), greedy);
}

#[test]
fn broken_folders_fail_with_one_clear_line() {
    type Break = fn(&Path);
    let cases: [(&str, Break, &str); 8] = [
        (
            "truncated weights",
            |d| {
                let path = d.join("model.safetensors");
                truncate(&path, std::fs::metadata(&path).unwrap().len() - 100);
            },
            "lie outside the",
        ),
        ("header cut", |d| truncate(&d.join("model.safetensors"), 6), "starts with an 8-byte header length"),
        (
            "missing shard",
            |d| {
                let index = r#"{"weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors"}}"#;
                std::fs::write(d.join("model.safetensors.index.json"), index).unwrap();
            },
            "shard `model-00002-of-00002.safetensors` (for `model.norm.weight`) is missing",
        ),
        (
            "bad config field",
            |d| edit(&d.join("config.json"), "\"num_attention_heads\": 4", "\"num_attention_heads\": 5"),
            "cannot be grouped",
        ),
        (
            "unknown config field",
            |d| edit(&d.join("config.json"), "\"head_dim\"", "\"num_experts\": 8, \"head_dim\""),
            "`num_experts` is not a Qwen3ForCausalLM setting",
        ),
        ("tokenizer.json cut", |d| truncate(&d.join("tokenizer.json"), 500), "tokenizer.json is not JSON"),
        ("no tokenizer.json", |d| std::fs::remove_file(d.join("tokenizer.json")).unwrap(), "has no tokenizer.json"),
        (
            "bad sampling default",
            |d| edit(&d.join("generation_config.json"), "\"use_cache\"", "\"top_p\": 0, \"use_cache\""),
            "generation_config.json: `(sampling)` top_p must be in (0, 1], got 0",
        ),
    ];
    for (what, damage, want) in cases {
        let dir = copy();
        damage(dir.path());
        let err = run_fails(dir.path());
        assert!(err.contains(want), "{what}: {err:?} should say {want:?}");
    }
}

fn truncate(path: &Path, len: u64) {
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(len).unwrap();
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{from} in {}", path.display());
    std::fs::write(path, text.replace(from, to)).unwrap();
}
