//! `plumb chat` and a long prefill as a person sees them: on a pseudo-terminal, with keys typed.
//! Greedy sampling on the default model keeps the answers fixed.

#[path = "support/plumb.rs"]
mod support;

use rexpect::session::{Options, PtySession, spawn_with_options};
use support::{Home, model_path};

const LEFT: &str = "\x1b[D";
const UP: &str = "\x1b[A";

/// `plumb ARGS` on a terminal (a real TERM, so line editing is on), waiting up to a minute per
/// expectation.
fn spawn(home: &Home, args: &[&str]) -> PtySession {
    let mut cmd = home.plumb();
    cmd.args(args).env("TERM", "xterm").env_remove("NO_COLOR");
    spawn_with_options(cmd, Options::new().timeout_ms(Some(120_000)).strip_ansi_escape_codes(true)).unwrap()
}

/// A chat, ready at its first prompt.
fn chat(home: &Home, extra: &[&str]) -> PtySession {
    let model = model_path().to_str().unwrap();
    let args = [&["chat", "--threads", "1", "--temperature", "0", "--model", model][..], extra].concat();
    let mut p = spawn(home, &args);
    p.exp_string("/help for commands").unwrap();
    p.exp_string("> ").unwrap();
    p
}

/// Types `keys` and Enter.
fn enter(p: &mut PtySession, keys: &str) {
    p.send(keys).unwrap();
    p.send("\r").unwrap();
    p.flush().unwrap();
}

fn exits_cleanly(p: &mut PtySession) {
    p.exp_eof().unwrap();
    // nix's WaitStatus is not re-exported by rexpect: compare its printed form.
    let status = format!("{:?}", p.process().wait().unwrap());
    assert!(status.starts_with("Exited(") && status.ends_with(", 0)"), "{status}");
}

#[test]
fn chat_edits_lines_recalls_history_and_clears() {
    let home = Home::new();
    let mut p = chat(&home, &["-n", "32"]);
    // "/cler", cursor one left, "a": the line sent is "/clear" only if editing keys work.
    enter(&mut p, &format!("/cler{LEFT}a"));
    p.exp_string("(conversation cleared)").unwrap();
    p.exp_string("> ").unwrap();
    enter(&mut p, "What is the capital of France?");
    p.exp_string("Paris").unwrap();
    p.exp_string("> ").unwrap();
    // Up recalls the last line; sent again, it gets the same answer.
    p.send(UP).unwrap();
    p.flush().unwrap();
    p.exp_string("What is the capital of France?").unwrap();
    enter(&mut p, "");
    p.exp_string("Paris").unwrap();
    p.exp_string("> ").unwrap();
    enter(&mut p, "/help");
    p.exp_string("/system TEXT").unwrap();
    p.exp_string("> ").unwrap();
    p.send_control('d').unwrap();
    exits_cleanly(&mut p);
    let history = std::fs::read_to_string(home.path().join("chat_history")).unwrap();
    assert!(history.contains("/clear\n") && history.contains("What is the capital of France?"), "{history}");
}

#[test]
fn ctrl_c_stops_a_reply_and_the_chat_goes_on() {
    let home = Home::new();
    let mut p = chat(&home, &[]);
    enter(&mut p, "Write a long story about a dragon.");
    p.exp_string("Once upon a time").unwrap();
    p.send_control('c').unwrap();
    p.exp_string("[stopped by Ctrl-C]").unwrap();
    p.exp_string("> ").unwrap();
    enter(&mut p, "/system Answer in one short sentence.");
    p.exp_string("(system message set)").unwrap();
    p.exp_string("> ").unwrap();
    enter(&mut p, "What is the capital of France?");
    p.exp_string("Paris").unwrap();
    p.exp_string("> ").unwrap();
    // At the prompt, one Ctrl-C explains; a second one leaves.
    p.send_control('c').unwrap();
    p.exp_string("Ctrl-C again").unwrap();
    p.send_control('c').unwrap();
    exits_cleanly(&mut p);
}

#[test]
fn a_reply_cut_by_the_token_limit_says_so() {
    let home = Home::new();
    let mut p = chat(&home, &["-n", "4"]);
    enter(&mut p, "What is the capital of France?");
    p.exp_string("[reply cut at the -n limit of 4 tokens]").unwrap();
    p.exp_string("> ").unwrap();
    enter(&mut p, "/bye");
    exits_cleanly(&mut p);
}

/// A 7,000-token prompt shows its prefill progress on a terminal (the test stops once it has).
#[test]
fn a_long_prompt_shows_prefill_progress_on_a_terminal() {
    let home = Home::new();
    const WORDS: [&str; 12] = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "was", "with", "on"];
    let text: Vec<&str> = (0..7000).map(|i| WORDS[(i * 7 + i / 12) % WORDS.len()]).collect();
    let file = home.path().join("long.txt");
    std::fs::write(&file, text.join(" ")).unwrap();
    let mut p = spawn(&home, &["run", "--raw", "--threads", "1", "-n", "1", "-f", file.to_str().unwrap()]);
    let (_, line) = p.exp_regex(r"prefill \d+/\d+ tokens \(\d+%\), \d+ tok/s, eta \d+ s").unwrap();
    let total: usize = line.split('/').nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!((7000..8000).contains(&total), "{line}");
}
