//! Records the commit plumb is built from, and whether the tracked sources differed from it
//! (receipts excepted: they record results, not code), so every receipt names the code that
//! produced it rather than whatever directory it was run from.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let commit = git(&["-C", root, "rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = git(&["-C", root, "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)receipts"])
        .map_or("unknown".to_string(), |s| (!s.is_empty()).to_string());
    println!("cargo:rustc-env=PLUMB_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=PLUMB_BUILD_DIRTY={dirty}");
    // Any source change, commit or checkout changes the answer.
    for path in ["crates", "Cargo.toml", "Cargo.lock", ".git/HEAD", ".git/index"] {
        println!("cargo:rerun-if-changed={root}/{path}");
    }
}
