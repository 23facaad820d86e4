//! Receipts: JSON records of a benchmark or gate run — the command, the commit, the machine,
//! the model's sha256, every figure — written by this invocation.

use serde_json::{Value, json};
use std::path::Path;

/// The git commit plumb was built from (or the working tree's, when run from a checkout), with
/// `+dirty` when tracked files other than receipts differ from it (receipts do not change code).
pub fn git_commit() -> String {
    let from_tree = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)receipts"])
        .output()
        .ok()
        .is_some_and(|o| o.status.success() && !o.stdout.is_empty());
    match from_tree {
        Some(c) if dirty => format!("{c}+dirty"),
        Some(c) => c,
        None => option_env!("PLUMB_GIT_COMMIT").unwrap_or("unknown").to_string(),
    }
}

/// What this machine is: CPU model, cores, memory.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("unknown")
        .trim();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kb: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    json!({
        "cpu": cpu,
        "logical_cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "memory_gib": (mem_kb as f64 / 1048576.0 * 10.0).round() / 10.0,
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
    })
}

/// The common receipt envelope around `figures`.
pub fn envelope(kind: &str, model_path: &Path, model_sha256: &str, figures: Value) -> Value {
    json!({
        "kind": kind,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "commit": git_commit(),
        "plumb_version": env!("CARGO_PKG_VERSION"),
        "machine": machine(),
        "model": { "path": model_path.display().to_string(), "sha256": model_sha256 },
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        "evidence_origin": "current_invocation",
        "figures": figures,
    })
}

/// Writes a receipt as pretty JSON, creating parent folders.
pub fn write(path: &Path, receipt: &Value) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(receipt)? + "\n")?;
    Ok(())
}
