//! `--draft` and `--draft-model` as a user runs them: answers identical to undrafted decoding
//! (seeded sampling), the draft counters reported, and clear errors for a draft model that cannot
//! draft for the target or for flags that contradict each other.

#[path = "support/plumb.rs"]
mod support;

use std::path::PathBuf;
use support::{plumb, text};

const PROMPT: &str = "List the numbers from 1 to 20, separated by commas.";

fn run(extra: &[&str]) -> (String, String) {
    let args = ["run", "--threads", "1", "-n", "40", "--temperature", "0.8", "--seed", "11", PROMPT];
    let out = plumb().args(args).args(extra).output().unwrap();
    assert!(out.status.success(), "{extra:?}: {}", text(&out.stderr));
    (text(&out.stdout), text(&out.stderr))
}

#[test]
fn drafted_answers_equal_the_undrafted_answer() {
    let (plain, _) = run(&[]);
    let (ngram, err) = run(&["--draft", "ngram:k=5,n=2"]);
    assert_eq!(ngram, plain, "n-gram drafts changed the answer");
    assert!(err.contains("[drafts ngram:k=5,n=2: "), "{err}");
    // The default model drafting for itself: each draft is the target's own sample.
    let (model, err) = run(&["--draft-model", "smollm2", "--draft-k", "3"]);
    assert_eq!(model, plain, "a draft model changed the answer");
    let line = err.lines().find(|l| l.starts_with("[drafts model:smollm2:k=3: ")).unwrap_or_else(|| panic!("{err}"));
    let counts: Vec<&str> = line.split(": ").nth(1).unwrap().split(' ').collect();
    assert_eq!(counts[1], "of", "{line}");
    assert_eq!(counts[0], counts[2], "every self-draft is accepted: {line}");
    assert_ne!(counts[0], "0", "{line}");
}

fn fails_with(extra: &[&str], needle: &str) {
    let out = plumb().args(["run", "--threads", "1", "-n", "4", PROMPT]).args(extra).output().unwrap();
    assert!(!out.status.success(), "expected failure for {extra:?}");
    let err = text(&out.stderr);
    assert!(err.contains(needle), "for {extra:?} expected `{needle}` in:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn contradictory_flags_and_foreign_draft_models_are_refused() {
    fails_with(&["--draft", "ngram", "--draft-model", "smollm2"], "pick one");
    fails_with(&["--draft-k", "3"], "--draft-k needs --draft-model");
    fails_with(&["--draft", "ngram", "--draft-k", "3"], "--draft-k goes with --draft-model");
    fails_with(&["--draft-model", "smollm2", "--draft-k", "0"], "--draft-k 0 is outside 1..=16");
    fails_with(&["--draft", "model"], "a draft model is --draft-model PATH");
    fails_with(&["--draft-model", "/nonexistent/draft.gguf"], "/nonexistent/draft.gguf");
    // A tiny Qwen3 folder: a real checkpoint, but its few hundred tokens are not SmolLM2's.
    let foreign = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/qwen3/hf");
    fails_with(&["--draft-model", foreign.to_str().unwrap()], "must share the target's tokenizer");
}
