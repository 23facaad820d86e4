//! The `plumb` binary as a user runs it: answers, streaming, and clear errors on bad input.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs plumb; model-running commands get one kernel thread, as tests run side by side.
fn plumb(args: &[&str]) -> Output {
    let threads: &[&str] = if matches!(args[0], "run" | "perplexity") { &["--threads", "1"] } else { &[] };
    Command::new(env!("CARGO_BIN_EXE_plumb")).args(args).args(threads).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn raw_greedy_continues_with_paris() {
    let out = plumb(&["run", "--raw", "--temperature", "0", "-n", "8", "The capital of France is"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Paris"), "{}", text(&out.stdout));
}

#[test]
fn chat_answer_names_paris_and_memory_stays_small() {
    let out = plumb(&["run", "--temperature", "0", "-n", "32", "What is the capital of France?"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Paris"), "{}", text(&out.stdout));
    // "resident N MB" after generating: weights are read in place from the mapped file, so
    // memory stays under 1.3 × the 98.4 MB file (no float32 copy of the weights).
    let err = text(&out.stderr);
    let mb: f64 = err.split("resident ").nth(1).and_then(|s| s.split(' ').next()).and_then(|v| v.parse().ok()).unwrap();
    assert!(mb < 1.3 * 98.36, "resident {mb} MB");
}

#[test]
fn chat_reads_turns_until_end_of_input() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["chat", "--temperature", "0", "-n", "16", "--threads", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"What is the capital of France?\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Paris"), "{}", text(&out.stdout));
}

fn fails_with(args: &[&str], needle: &str) {
    let out = plumb(args);
    assert!(!out.status.success(), "expected failure for {args:?}");
    let err = text(&out.stderr);
    assert!(err.contains(needle), "for {args:?} expected `{needle}` in:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_input_gets_clear_errors() {
    fails_with(&["run", ""], "the prompt is empty");
    fails_with(
        &["run", "--ctx", "32", "-n", "8", &"word ".repeat(40)],
        "leaves no room for an answer in the context of 32 tokens",
    );
    fails_with(&["run", "--top-p", "0", "hi"], "top_p must be in (0, 1]");
    fails_with(&["run", "--temperature", "-1", "hi"], "temperature must be between 0 and 100");
    fails_with(&["run", "--ctx", "100000", "hi"], "--ctx 100000 is outside");
    fails_with(&["run", "--model", "no-such-model", "hi"], "no model `no-such-model`");
    fails_with(&["bench", "--repetitions", "0"], "--repetitions");
    fails_with(&["bench", "--concurrency", "0,4"], "positive counts");
    let dir = std::env::temp_dir().join(format!("plumb-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.gguf");
    std::fs::write(&junk, b"definitely not a model").unwrap();
    fails_with(&["inspect", junk.to_str().unwrap()], "is not a GGUF file");
    fails_with(&["perplexity", "--chunk", "64", junk.to_str().unwrap()], "fewer than one chunk");
}

#[test]
fn inspect_json_reports_the_default_model() {
    let out = Command::new(env!("CARGO_BIN_EXE_plumb")).args(["inspect", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["config"]["architecture"], "LlamaForCausalLM");
    assert_eq!(v["config"]["num_hidden_layers"], 30);
    assert_eq!(v["tensor_types"]["Q4_1"]["count"], 210);
    assert_eq!(v["pre_tokenizer"], "smollm");
    assert_eq!(v["has_chat_template"], true);
}
