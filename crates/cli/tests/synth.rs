//! `plumb synth` end to end: the tiny Llama, Qwen3 and Qwen3-MoE folders it writes are inspected
//! and run by plumb itself (every family gated on the CPU, so no opt-in is needed), the same seed writes the
//! same bytes, and bad input — an unknown preset or architecture, a contradictory config, a
//! folder that is not empty — fails with one clear line, never a panic.

#[path = "support/plumb.rs"]
mod support;

use std::path::Path;
use support::{plumb, text};

/// `plumb synth ARGS... DIR`, asserting success.
fn synth(args: &[&str], dir: &Path) {
    let out = plumb().arg("synth").args(args).arg(dir).output().unwrap();
    assert!(out.status.success(), "plumb synth {args:?}: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), dir.to_str().unwrap(), "the folder is printed for scripts");
}

/// `plumb synth ARGS...` expected to fail: its stderr.
fn synth_fails(args: &[&str]) -> String {
    let out = plumb().arg("synth").args(args).output().unwrap();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "plumb synth {args:?} should fail");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn synth_folders_inspect_and_run() {
    for (preset, family, arch) in [
        ("tiny-llama", "llama", "LlamaForCausalLM"),
        ("tiny-qwen3", "qwen3", "Qwen3ForCausalLM"),
        ("tiny-qwen3-moe", "qwen3_moe", "Qwen3MoeForCausalLM"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(preset);
        synth(&["--arch", preset, "--seed", "3"], &dir);
        let d = dir.to_str().unwrap();

        let out = plumb().args(["inspect", d]).output().unwrap();
        let report = text(&out.stdout);
        assert!(out.status.success(), "{}", text(&out.stderr));
        for want in [arch, "Hugging Face safetensors", "512 tokens", "end of generation"] {
            assert!(report.contains(want), "{preset}: {want:?} in {report}");
        }

        let run = |experimental: &str| {
            plumb()
                .args(["run", "--model", d, "--temperature", "0", "-n", "12", "Hello, world"])
                .env("PLUMB_EXPERIMENTAL", experimental)
                .output()
                .unwrap()
        };
        let out = run(family);
        assert!(out.status.success(), "{preset}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("12 generated"), "{preset}: {}", text(&out.stderr));
        // Every family runs on the CPU without opting in: each has passed its gate there.
        let out = run("");
        assert!(out.status.success(), "{preset} without PLUMB_EXPERIMENTAL: {}", text(&out.stderr));
    }
}

#[test]
fn same_seed_same_bytes_through_the_cli() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = |name: &str, seed: &str| {
        let dir = tmp.path().join(name);
        synth(&["--arch", "tiny-qwen3-moe", "--seed", seed, "--threads", "1"], &dir);
        std::fs::read(dir.join("model.safetensors")).unwrap()
    };
    let (a, b, c) = (folder("a", "7"), folder("b", "7"), folder("c", "8"));
    assert!(a == b, "same seed, same weights");
    assert!(a != c, "another seed, other weights");
}

#[test]
fn config_json_and_sharding_options() {
    let tmp = tempfile::tempdir().unwrap();
    let first = tmp.path().join("first");
    synth(&["--arch", "tiny-llama", "--dtype", "f32", "--layers", "8"], &first);
    let second = tmp.path().join("second");
    let config = first.join("config.json");
    synth(&["--config", config.to_str().unwrap(), "--dtype", "f32", "--max-shard-mib", "1"], &second);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    assert_eq!(read(&config), read(&second.join("config.json")), "a synth config.json is a fixed point");
    assert!(read(&config).contains("\"num_hidden_layers\": 8"));
    assert!(second.join("model.safetensors.index.json").exists(), "1.4 MB of weights in 1 MiB shards");
    let out = plumb().args(["run", "--model", second.to_str().unwrap(), "-n", "4", "hi"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn bad_input_fails_with_one_clear_line() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = out.to_str().unwrap();
    let err = synth_fails(&["--arch", "gpt-5", o]);
    assert!(err.contains("unknown preset `gpt-5`") && err.contains("qwen3-30b-a3b"), "{err}");

    type Edit = fn(&mut serde_json::Value);
    let config = |name: &str, edit: Edit| {
        let mut c: serde_json::Value = serde_json::from_str(
            r#"{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "vocab_size": 400, "max_position_embeddings": 512}"#,
        )
        .unwrap();
        edit(&mut c);
        let path = tmp.path().join(name);
        std::fs::write(&path, c.to_string()).unwrap();
        path
    };
    let cases: [(&str, Edit, &str); 4] = [
        ("gpt2.json", |c| c["architectures"] = serde_json::json!(["GPT2LMHeadModel"]), "plumb synth writes"),
        ("kv.json", |c| c["num_key_value_heads"] = 3.into(), "cannot be grouped"),
        ("type.json", |c| c["model_type"] = "llama".into(), "contradicts architecture"),
        ("extra.json", |c| c["num_experts"] = 8.into(), "`num_experts` is not a Qwen3ForCausalLM setting"),
    ];
    for (name, edit, want) in cases {
        let path = config(name, edit);
        let err = synth_fails(&["--config", path.to_str().unwrap(), o]);
        assert!(err.contains(want) && err.contains(name), "{name}: {err:?} should say {want:?}");
        assert!(!out.exists(), "{name}: nothing is written for a bad config");
    }
    let err = synth_fails(&["--config", tmp.path().join("missing.json").to_str().unwrap(), o]);
    assert!(err.contains("cannot read") && err.contains("missing.json"), "{err}");
    assert!(synth_fails(&["--arch", "tiny-llama", "--dtype", "q4", o]).contains("unknown dtype `q4`"));
    assert!(synth_fails(&[o]).contains("--arch"), "a shape is required");

    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep.txt"), "mine").unwrap();
    let err = synth_fails(&["--arch", "tiny-llama", o]);
    assert!(err.contains("is not empty"), "{err}");
}

#[test]
fn help_lists_the_presets() {
    let out = plumb().args(["synth", "--help"]).output().unwrap();
    let help = text(&out.stdout);
    for want in ["llama-3.1-8b", "qwen3-8b", "qwen3-30b-a3b", "tiny-qwen3-moe", "Qwen3MoeForCausalLM", "--layers"] {
        assert!(help.contains(want), "{want} in {help}");
    }
}
