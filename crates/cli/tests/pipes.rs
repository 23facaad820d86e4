//! A closed standard output ends every command quietly, as with any Unix tool: `plumb … | head -1`
//! and `plumb … | true` exit 0 or with SIGPIPE, never with a panic or an error message.

#[path = "support/plumb.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use support::{Home, text};

/// Every command, with arguments that keep it short. Model-running ones get one kernel thread,
/// as tests run side by side.
fn commands(corpus: &str) -> Vec<(Vec<&str>, Option<&'static str>)> {
    vec![
        (vec!["--help"], None),
        (vec!["pull"], None),
        (vec!["list"], None),
        (vec!["inspect"], None),
        (vec!["inspect", "--json"], None),
        (vec!["run", "--threads", "1", "--raw", "--temperature", "0", "-n", "24", "Once upon a time"], None),
        (vec!["chat", "--threads", "1", "--temperature", "0", "-n", "24"], Some("Tell me a story.\nAnd another.\n")),
        (
            vec![
                "bench",
                "--threads",
                "1",
                "--prompt-len",
                "16",
                "--gen-len",
                "4",
                "--depth",
                "0",
                "--repetitions",
                "1",
            ],
            None,
        ),
        (vec!["perplexity", "--threads", "1", "--chunk", "16", "--chunks", "1", corpus], None),
        (vec!["check", "--threads", "1", "--quick"], None),
    ]
}

fn assert_quiet(args: &[&str], how: &str, status: ExitStatus, stderr: &str) {
    let sigpipe = status.signal() == Some(libc::SIGPIPE);
    assert!(status.success() || sigpipe, "plumb {args:?} {how}: {status}\n{stderr}");
    for bad in ["panicked", "Broken pipe", "error"] {
        assert!(
            !stderr.to_lowercase().contains(&bad.to_lowercase()),
            "plumb {args:?} {how} printed `{bad}`:\n{stderr}"
        );
    }
}

fn corpus(home: &Home) -> String {
    let path = home.path().join("corpus.txt");
    std::fs::write(&path, "The quick brown fox jumps over the lazy dog. ".repeat(20)).unwrap();
    path.display().to_string()
}

/// `plumb … | head -1`: the reader takes one line and goes away.
#[test]
fn every_command_piped_into_head_exits_quietly() {
    let home = Home::new();
    let corpus = corpus(&home);
    for (args, input) in commands(&corpus) {
        let mut child = home
            .plumb()
            .args(&args)
            .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(input) = input {
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_quiet(&args, "| head -1", out.status, &text(&out.stderr));
    }
}

/// `plumb … | true`: the reader is gone before the first write, so every command meets the
/// closed pipe whatever it prints.
#[test]
fn every_command_writing_to_a_closed_pipe_exits_quietly() {
    let home = Home::new();
    let corpus = corpus(&home);
    for (args, input) in commands(&corpus) {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut child = home
            .plumb()
            .args(&args)
            .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(input) = input {
            // The child may already be gone (killed by SIGPIPE): a failed write is fine here.
            let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
        }
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert_quiet(&args, "| true", out.status, &stderr);
        assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "plumb {args:?} | true: {}\n{stderr}", out.status);
    }
}
