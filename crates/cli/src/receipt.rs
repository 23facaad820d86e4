//! Receipts: JSON records of a benchmark or gate run — the exact argv, the commit the binary was
//! built from (and whether its tree was dirty), the binary's own sha256, the machine, the model's
//! sha256, every figure and a digest of the figures — written by this invocation.

use plumb_checkpoint::source::{NoProgress, sha256_file};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The commit this binary was built from.
pub const BUILD_COMMIT: &str = env!("PLUMB_BUILD_COMMIT");
/// Whether tracked files (receipts aside) differed from that commit when it was built.
pub const BUILD_DIRTY: &str = env!("PLUMB_BUILD_DIRTY");

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

/// sha256 of `figures` as compact JSON (keys in the order written), taken after one round trip
/// through text so that what a reader parses from the file hashes the same (serde_json parses
/// floats exactly here, `float_roundtrip`; the round trip also guards other JSON readers' writers):
/// lets a reader check that the figures were not edited after the run.
pub fn figures_digest(figures: &Value) -> String {
    let text = figures.to_string();
    let canonical = serde_json::from_str::<Value>(&text).map_or(text, |v| v.to_string());
    format!("{:x}", Sha256::digest(canonical.as_bytes()))
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// When the process started measuring; created at the start of a command.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    unix: f64,
    at: Instant,
}

impl Started {
    pub fn now() -> Self {
        Started { unix: unix_now(), at: Instant::now() }
    }
}

/// The common receipt envelope around `figures`.
pub fn envelope(kind: &str, started: Started, model_path: &Path, model_sha256: &str, figures: Value) -> Value {
    let binary_sha256 = std::env::current_exe().ok().and_then(|p| sha256_file(&p, &NoProgress).ok());
    json!({
        "kind": kind,
        "argv": std::env::args().collect::<Vec<_>>(),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "build": {
            "commit": BUILD_COMMIT,
            "dirty": BUILD_DIRTY,
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            "binary_sha256": binary_sha256,
        },
        "plumb_version": env!("CARGO_PKG_VERSION"),
        "machine": machine(),
        "model": { "path": model_path.display().to_string(), "sha256": model_sha256 },
        "evidence_origin": "current_invocation",
        "evidence": {
            "pid": std::process::id(),
            "started_unix": started.unix,
            "finished_unix": unix_now(),
            "wall_secs": started.at.elapsed().as_secs_f64(),
        },
        "figures_sha256": figures_digest(&figures),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_survives_writing_and_reading_the_receipt() {
        let figures = json!({
            "f32": 0.1f32, "tiny": 7.136e-7, "huge": 1.5e300, "neg_zero": -0.0, "int": 42u64,
            "neg": -3i64, "nested": {"b": [1.0, 2.5e-12, f64::NAN], "a": "x"}, "third": 1.0 / 3.0,
        });
        let pretty = serde_json::to_string_pretty(&figures).unwrap();
        let read: Value = serde_json::from_str(&pretty).unwrap();
        assert_eq!(figures_digest(&figures), figures_digest(&read));
    }
}
