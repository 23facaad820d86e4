//! Terminal progress bars for long steps (download, extraction, hashing, loading).
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
                let b = ProgressBar::new_spinner();
                b.enable_steady_tick(std::time::Duration::from_millis(100));
                b
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
