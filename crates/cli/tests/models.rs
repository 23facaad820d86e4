//! Models as users manage them: `plumb list` and `plumb rm` on a private cache, what `--model`
//! says about a directory or a Hugging Face name, and an unsupported architecture named as such
//! before any tokenizer or metadata complaint.

#[path = "support/plumb.rs"]
mod support;

use support::{Home, bare_gguf, model_path, plumb, text};

#[test]
fn list_shows_the_cached_models_and_rm_removes_one() {
    let home = Home::new();
    bare_gguf(&home.models().join("falcon-test.gguf"), "falcon");
    let out = home.plumb().arg("list").output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listing = text(&out.stdout);
    let row =
        |name: &str| listing.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{listing}")).to_string();
    let smol = row("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(smol.contains("98.4 MB") && smol.contains("llama (family llama)") && smol.ends_with("passed"), "{smol}");
    assert!(row("falcon-test.gguf").contains("falcon (not supported)"), "{listing}");

    let out = home.plumb().args(["rm", "smollm2"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("removed"), "{}", text(&out.stdout));
    assert!(model_path().exists(), "rm removes the link in the cache, not its target");
    let out = home.plumb().args(["rm", "falcon-test"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let left: Vec<_> = std::fs::read_dir(home.models()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "the stamp goes too: {left:?}");
    let out = home.plumb().arg("list").output().unwrap();
    assert!(text(&out.stderr).contains("no models cached"), "{}", text(&out.stderr));

    let out = home.plumb().args(["rm", "smollm2"]).output().unwrap();
    assert!(!out.status.success() && text(&out.stderr).contains("no cached model `smollm2`"));
}

#[test]
fn rm_refuses_files_outside_the_cache() {
    let home = Home::new();
    let outside = home.path().join("precious.gguf");
    std::fs::write(&outside, b"keep me").unwrap();
    for spec in [outside.to_str().unwrap(), model_path().to_str().unwrap()] {
        let out = home.plumb().args(["rm", spec]).output().unwrap();
        let err = text(&out.stderr);
        assert!(!out.status.success() && err.contains("is not in plumb's model cache"), "{spec}: {err}");
    }
    assert!(outside.exists() && model_path().exists());
}

#[test]
fn a_directory_or_a_hub_name_as_model_says_what_plumb_accepts() {
    let home = Home::new();
    let dir = home.models();
    let dir = dir.to_str().unwrap();
    for args in [&["run", "--model", dir, "hi"][..], &["inspect", dir]] {
        let out = plumb().args(args).output().unwrap();
        let err = text(&out.stderr);
        assert!(err.contains("is a directory without a config.json"), "{err}");
        assert!(err.contains("this one holds: SmolLM2-135M-Instruct.Q4_1.gguf"), "{err}");
        assert!(!err.contains("os error"), "{err}");
    }
    let out = plumb().args(["run", "--model", "HuggingFaceTB/SmolLM2-135M-Instruct", "hi"]).output().unwrap();
    let err = text(&out.stderr);
    assert!(err.contains("looks like a Hugging Face repository name") && err.contains("smollm2"), "{err}");
}

#[test]
fn an_unsupported_architecture_is_named_before_anything_else() {
    let dir = tempfile::tempdir().unwrap();
    for (arch, named) in [
        ("falcon", "architecture `falcon` is not supported"),
        ("gemma", "architecture `gemma` (`GemmaForCausalLM`) is not supported"),
    ] {
        // No tokenizer, no hyper-parameters: without the architecture check first, these fail
        // on a missing metadata key.
        let path = dir.path().join(format!("{arch}.gguf"));
        bare_gguf(&path, arch);
        let path = path.to_str().unwrap();
        for args in [&["run", "--model", path, "hi"][..], &["chat", "--model", path], &["inspect", path]] {
            let out = plumb().args(args).output().unwrap();
            let err = text(&out.stderr);
            assert!(!out.status.success() && err.contains(named), "{args:?}: {err}");
            assert!(err.contains("plumb runs: LlamaForCausalLM"), "{err}");
            assert!(!err.contains("tokenizer") && !err.contains("missing"), "{args:?}: {err}");
        }
    }
}
