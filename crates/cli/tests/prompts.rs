//! Prompts from anywhere and the limits of an answer: `-` (standard input), `-f FILE`, `--stop`,
//! generation until the end of the turn or a full context, and clear messages for bad counts.

#[path = "support/plumb.rs"]
mod support;

use std::io::Write;
use std::process::{Output, Stdio};
use support::{Home, plumb, text};

/// `plumb run --threads 1 ARGS`, with `stdin` as standard input.
fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = plumb()
        .arg("run")
        .args(["--threads", "1"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The figure before `label` in the stats line, e.g. `[37 prompt tokens, …; 8 generated, …]`.
fn stat(stderr: &str, label: &str) -> usize {
    let at = stderr.rfind(label).unwrap_or_else(|| panic!("no `{label}` in {stderr}"));
    stderr[..at].trim_end().rsplit([' ', '[']).next().unwrap().parse().unwrap()
}

const GREEDY: [&str; 4] = ["--raw", "--temperature", "0", "-n"];

#[test]
fn prompt_from_stdin_and_from_a_file_equal_the_argument() {
    let prompt = "The capital of France is";
    let from_arg = ok(&run(&[&GREEDY[..], &["8", prompt]].concat(), ""));
    assert!(from_arg.contains("Paris"), "{from_arg}");
    // Trailing newlines are dropped, as `$(cat file)` would.
    assert_eq!(ok(&run(&[&GREEDY[..], &["8", "-"]].concat(), &format!("{prompt}\n"))), from_arg);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prompt.txt");
    std::fs::write(&file, format!("{prompt}\n\n")).unwrap();
    let file = file.to_str().unwrap();
    assert_eq!(ok(&run(&[&GREEDY[..], &["8", "-f", file]].concat(), "")), from_arg);
    assert_eq!(ok(&run(&[&GREEDY[..], &["8", "--file", file]].concat(), "")), from_arg);

    let err = text(&run(&["-"], "").stderr);
    assert!(err.contains("the prompt on standard input is empty"), "{err}");
    let err = text(&run(&[], "").stderr);
    assert!(err.contains("no prompt: pass it as an argument") && err.contains("-f FILE"), "{err}");
    let err = text(&run(&["-f", file, "also a prompt"], "").stderr);
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn stop_text_is_never_printed_even_across_tokens() {
    let prompt = "The capital of France is";
    let full = ok(&run(&[&GREEDY[..], &["16", prompt]].concat(), ""));
    // " answer" and " is" are separate tokens: the stop text starts inside one and ends in the next.
    let stop = "swer is";
    let cut = full.find(stop).unwrap_or_else(|| panic!("the greedy answer changed: {full:?}"));
    let out = run(&[&GREEDY[..], &["16", "--stop", "no such text", "--stop", stop, prompt]].concat(), "");
    assert_eq!(ok(&out), format!("{}\n", &full[..cut]));
    assert!(text(&out.stderr).contains("stopped at a --stop string"), "{}", text(&out.stderr));
    // A stop text that never comes changes nothing.
    assert_eq!(ok(&run(&[&GREEDY[..], &["16", "--stop", "zebra", prompt]].concat(), "")), full);
}

#[test]
fn by_default_an_answer_runs_to_the_end_of_its_turn() {
    let out = run(&["--temperature", "0", "What is the capital of France?"], "");
    assert!(ok(&out).contains("Paris"));
    assert!(text(&out.stderr).contains("stopped at end of turn"), "{}", text(&out.stderr));
}

/// A prompt near the context length is answered until the context is full, and the stats say so.
/// Off a terminal, the prefill meter stays silent even though this prompt takes two steps.
#[test]
fn a_long_prompt_is_answered_until_the_context_is_full() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("long.txt");
    std::fs::write(&file, "one two three four five six seven eight nine ten ".repeat(60)).unwrap();
    let out = run(&["--raw", "--temperature", "0", "--ctx", "640", "-f", file.to_str().unwrap()], "");
    ok(&out);
    let err = text(&out.stderr);
    assert!(err.contains("context full (640 tokens)"), "{err}");
    let prompt_tokens = stat(&err, "prompt tokens");
    assert!(prompt_tokens > 512 && prompt_tokens < 640, "{err}");
    assert_eq!(prompt_tokens + stat(&err, "generated"), 640, "{err}");
    assert!(!err.contains("prefill "), "no meter off a terminal:\n{err}");

    let out = run(&["--raw", "--ctx", "600", "-f", file.to_str().unwrap()], "");
    let err = text(&out.stderr);
    assert!(err.contains("leaves no room for an answer in the context of 600 tokens"), "{err}");
}

#[test]
fn bad_counts_say_what_they_take() {
    for (args, needle) in [
        (&["-n", "-1", "hi"][..], "must be a positive integer (1 or more), got -1"),
        (&["-n", "0", "hi"], "must be a positive integer (1 or more), got 0"),
        (&["--ctx", "-5", "hi"], "must be a positive integer"),
        (&["--top-k", "-3", "hi"], "must be a non-negative integer"),
        (&["--seed", "-4", "hi"], "must be a non-negative integer"),
    ] {
        let out = run(args, "");
        let err = text(&out.stderr);
        assert!(!out.status.success() && err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("unexpected argument"), "{err}");
    }
    let out = plumb().args(["run", "--threads", "-2", "hi"]).output().unwrap();
    let err = text(&out.stderr);
    assert!(err.contains("must be a non-negative integer (0 or more), got -2"), "{err}");
    let out = Home::new().plumb().args(["bench", "--gen-len", "-1"]).output().unwrap();
    assert!(text(&out.stderr).contains("must be a positive integer"), "{}", text(&out.stderr));
}

#[test]
fn more_threads_than_cores_gets_a_warning() {
    let cores = std::thread::available_parallelism().unwrap().get();
    let threads = (cores + 1).to_string();
    let out = plumb().args(["run", "--raw", "-n", "1", "--threads", &threads, "hi"]).output().unwrap();
    ok(&out);
    let err = text(&out.stderr);
    assert!(err.contains(&format!("warning: --threads {threads} is more than the {cores} core")), "{err}");
    let out = run(&["--raw", "-n", "1", "hi"], "");
    assert!(!text(&out.stderr).contains("warning"), "{}", text(&out.stderr));
}
