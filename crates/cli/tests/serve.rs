//! `plumb serve` as a process: it prints where it listens and a ready line, answers, and on
//! SIGTERM stops accepting, lets an in-flight streamed answer finish within the grace period, and
//! exits 0; past the grace period it cuts what is still running and exits 0 all the same.

#[path = "support/plumb.rs"]
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::Home;

fn post(addr: &str, path: &str, body: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    s
}

/// Starts `plumb serve` with `args` and returns it, its stderr and the address it listens on,
/// once it says it is ready.
fn start(home: &Home, args: &[&str]) -> (std::process::Child, BufReader<std::process::ChildStderr>, String) {
    let mut child = home
        .plumb()
        .args(["serve", "--threads", "1", "--port", "0", "--served-model-name", "m"])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let (mut addr, mut ready, mut line) = (None, false, String::new());
    let start = Instant::now();
    while !ready && start.elapsed() < Duration::from_secs(60) {
        line.clear();
        if err.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(rest) = line.split("listening on http://").nth(1) {
            addr = Some(rest.split_whitespace().next().unwrap().to_string());
        }
        ready |= line.starts_with("ready: m at http://");
    }
    let addr = addr.expect("a `listening on` line");
    assert!(ready, "no ready line");
    (child, err, addr)
}

/// Sends SIGTERM to `child`.
fn terminate(child: &std::process::Child) {
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
}

#[test]
fn serve_drains_in_flight_requests_on_sigterm_and_exits_0() {
    let home = Home::new();
    // A grace period far beyond the answer's length, so a slow (shared, loaded) machine still
    // finishes it: this test is about draining; the next one about the grace running out.
    let (mut child, mut err, addr) = start(&home, &["--ctx", "256", "--grace", "600"]);
    let body = r#"{"model": "m", "prompt": "Once upon a time", "max_tokens": 60, "temperature": 0, "stream": true}"#;
    let mut inflight = post(&addr, "/v1/completions", body);
    // Wait for the first event, so the request is surely running, then ask the server to stop.
    let mut got = vec![0u8; 64];
    let n = inflight.read(&mut got).unwrap();
    assert!(n > 0);
    terminate(&child);
    let mut rest = String::new();
    inflight.read_to_string(&mut rest).unwrap();
    // (chunked framing follows the last event)
    assert!(rest.contains("data: [DONE]"), "the in-flight answer was cut: {rest}");
    assert!(rest.contains("\"finish_reason\":\"length\""), "{rest}");
    let status = child.wait().unwrap();
    assert!(status.success(), "plumb serve exited with {status}");
    let mut tail = String::new();
    err.read_to_string(&mut tail).unwrap();
    assert!(tail.contains("shutting down") && tail.contains("stopped"), "{tail}");
    // Nothing listens any more.
    assert!(TcpStream::connect(&addr).is_err());
}

#[test]
fn serve_cuts_what_outlives_the_grace_period_and_exits_0() {
    let home = Home::new();
    let (mut child, mut err, addr) = start(&home, &["--ctx", "4096", "--grace", "1"]);
    // Thousands of tokens on one thread (the end-of-text ids banned): far longer than the grace
    // period on any machine.
    let body = r#"{"model": "m", "prompt": "Once upon a time", "max_tokens": 4000, "temperature": 0, "stream": true, "logit_bias": {"0": -100, "1": -100, "2": -100}}"#;
    let mut inflight = post(&addr, "/v1/completions", body);
    let mut got = vec![0u8; 64];
    assert!(inflight.read(&mut got).unwrap() > 0);
    let stopping = Instant::now();
    terminate(&child);
    let mut rest = Vec::new();
    // The cut connection may end with an error (reset) or an early EOF; either way, not [DONE].
    let _ = inflight.read_to_end(&mut rest);
    let rest = String::from_utf8_lossy(&rest);
    assert!(!rest.contains("data: [DONE]"), "a 4000-token answer finished within a 1 s grace period");
    let status = child.wait().unwrap();
    assert!(status.success(), "plumb serve exited with {status}");
    assert!(stopping.elapsed() < Duration::from_secs(60), "stopping took {:?}", stopping.elapsed());
    let mut tail = String::new();
    err.read_to_string(&mut tail).unwrap();
    assert!(tail.contains("shutting down") && tail.contains("stopped"), "{tail}");
}
