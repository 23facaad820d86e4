//! The pinned Python tools the server's tests drive it with (OpenAI client, Schemathesis), in
//! target/pyenv, created by tools/server-tests/setup.sh on first use (it needs pip).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The virtualenv's `bin/` folder, set up if missing.
pub fn pyenv_bin() -> PathBuf {
    let status = Command::new("bash").arg(root().join("tools/server-tests/setup.sh")).status().expect("running bash");
    assert!(status.success(), "tools/server-tests/setup.sh failed: the Python test tools could not be installed");
    root().join("target/pyenv/bin")
}
