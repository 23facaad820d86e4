//! Terminal progress bars for long steps (download, extraction, hashing, loading) and the
//! prefill meter.
//! Bars draw only on a terminal; piped output stays clean.

use indicatif::{ProgressBar, ProgressStyle};
use plumb_checkpoint::source::Progress;
use std::io::IsTerminal;
use std::sync::Mutex;

/// Draws one bar per step on stderr.
#[derive(Debug, Default)]
pub struct Bars {
    bar: Mutex<Option<ProgressBar>>,
}

impl Progress for Bars {
    fn start(&self, what: &str, total: Option<u64>) {
        if !std::io::stderr().is_terminal() {
            eprintln!("{what} ...");
            return;
        }
        let bar = match total {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template("{msg:40} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
                    .expect("valid template")
                    .progress_chars("=> "),
            ),
            None => {
                // Only pip's download has no known size, and pip draws its own bar (size, speed,
                // eta) on the terminal: a spinner beside it would scramble both.
                eprintln!("{what} ...");
                return;
            }
        };
        bar.set_message(what.to_string());
        *self.bar.lock().expect("progress lock") = Some(bar);
    }

    fn advance(&self, bytes: u64) {
        if let Some(b) = self.bar.lock().expect("progress lock").as_ref() {
            b.inc(bytes);
        }
    }

    fn finish(&self) {
        if let Some(b) = self.bar.lock().expect("progress lock").take() {
            b.finish_and_clear();
        }
    }

    fn interactive(&self) -> bool {
        std::io::stderr().is_terminal()
    }
}

/// A one-line meter on stderr while a long prompt is prefilled: tokens done of total, tokens/s
/// and time left. Drawn only on a terminal, and only for prompts that take more than one step.
#[derive(Debug)]
pub struct PrefillMeter {
    total: usize,
    start: std::time::Instant,
    enabled: bool,
    drawn: bool,
}

impl PrefillMeter {
    /// A meter for a prompt of `total` tokens prefilled `step_tokens` at a time.
    pub fn new(total: usize, step_tokens: usize) -> Self {
        let enabled = total > step_tokens && std::io::stderr().is_terminal();
        PrefillMeter { total, start: std::time::Instant::now(), enabled, drawn: false }
    }

    /// Shows that `done` prompt tokens are computed.
    pub fn update(&mut self, done: usize) {
        if !self.enabled || done == 0 || done >= self.total {
            return;
        }
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        let rate = done as f64 / secs;
        let eta = (self.total - done) as f64 / rate;
        eprint!(
            "\r\x1b[2Kprefill {done}/{} tokens ({}%), {rate:.0} tok/s, eta {eta:.0} s",
            self.total,
            done * 100 / self.total
        );
        self.drawn = true;
    }

    /// Erases the line (before the answer starts).
    pub fn clear(&mut self) {
        if self.drawn {
            eprint!("\r\x1b[2K");
            self.drawn = false;
        }
    }
}

impl Drop for PrefillMeter {
    fn drop(&mut self) {
        self.clear();
    }
}
