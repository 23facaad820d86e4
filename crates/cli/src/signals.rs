//! Unix signals, the way command-line tools use them: a closed pipe ends the process quietly
//! (SIGPIPE's default action, as `cat` or `grep` do), and Ctrl-C can be caught while a chat reply
//! streams so that it stops the reply instead of the process.

use std::sync::atomic::{AtomicBool, Ordering};

/// Restores SIGPIPE's default action. Rust ignores SIGPIPE so that writes fail with `EPIPE`,
/// which `println!` turns into a panic; with the default, `plumb … | head -1` ends the way any
/// Unix tool does: silently, with the SIGPIPE status (141 in a shell).
pub fn restore_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL at startup, before any thread is spawned,
    // installs no handler code and has no other effect on this process's memory.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// While alive, Ctrl-C (SIGINT) sets a flag instead of ending the process; dropping it restores
/// the default, so Ctrl-C outside a reply behaves as usual.
#[derive(Debug)]
pub struct CatchInterrupt(());

impl CatchInterrupt {
    pub fn new() -> Self {
        INTERRUPTED.store(false, Ordering::SeqCst);
        // SAFETY: `on_sigint` only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t);
        }
        CatchInterrupt(())
    }

    /// Whether Ctrl-C was pressed since the last call (or since this guard was made).
    pub fn take(&self) -> bool {
        INTERRUPTED.swap(false, Ordering::SeqCst)
    }
}

impl Drop for CatchInterrupt {
    fn drop(&mut self) {
        // SAFETY: restores the default disposition; no handler code is involved.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
        }
    }
}
