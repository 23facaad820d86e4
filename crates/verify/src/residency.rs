//! The residency gate: while serving, weights are in memory — no file reads, no major page
//! faults. Counters come from /proc/self/io (`rchar`: bytes read by read() calls, even from the
//! page cache; `read_bytes`: bytes fetched from storage) and /proc/self/stat (`majflt`).

/// I/O and fault counters of this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IoCounters {
    pub rchar: u64,
    pub read_bytes: u64,
    pub major_faults: u64,
}

/// Reads the counters (zeros where /proc is unavailable).
pub fn counters() -> IoCounters {
    counters_and_cost().0
}

/// The counters, and the bytes reading them added to `rchar` after the snapshot was taken
/// (the snapshot of /proc/self/io excludes its own read; the read of /proc/self/stat follows it).
fn counters_and_cost() -> (IoCounters, u64) {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field =
        |name: &str| io.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesized command name; majflt is field 12 overall.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let major_faults = after.split_whitespace().nth(9).and_then(|v| v.parse().ok()).unwrap_or(0);
    let cost = (io.len() + stat.len()) as u64;
    (IoCounters { rchar: field("rchar:"), read_bytes: field("read_bytes:"), major_faults }, cost)
}

/// What serving cost in I/O, with the cost of reading the counters themselves removed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ResidencyReport {
    pub tokens: usize,
    pub file_bytes_read: u64,
    pub storage_bytes_read: u64,
    pub major_faults: u64,
    pub pass: bool,
    pub failures: Vec<String>,
}

/// Measures `serve` (which generates `tokens` tokens) and judges it.
pub fn measure(tokens: usize, serve: impl FnOnce()) -> ResidencyReport {
    // Reading /proc/self/io and /proc/self/stat shows up in rchar: subtract exactly what the
    // first snapshot read.
    let (before, cost) = counters_and_cost();
    serve();
    let after = counters();
    let file_bytes_read = (after.rchar - before.rchar).saturating_sub(cost);
    let storage_bytes_read = after.read_bytes - before.read_bytes;
    let major_faults = after.major_faults - before.major_faults;
    let mut failures = Vec::new();
    if file_bytes_read > 0 {
        failures.push(format!("serving {tokens} tokens read {file_bytes_read} bytes from files"));
    }
    if storage_bytes_read > 0 {
        failures.push(format!("serving {tokens} tokens fetched {storage_bytes_read} bytes from storage"));
    }
    if major_faults > 0 {
        failures.push(format!(
            "serving {tokens} tokens took {major_faults} major page faults (weights paged in from disk)"
        ));
    }
    ResidencyReport { tokens, file_bytes_read, storage_bytes_read, major_faults, pass: failures.is_empty(), failures }
}
