//! Shared by the CLI tests: the `plumb` binary, the default model's cached path, and a private
//! `PLUMB_HOME` that links to it (so tests can add, list and remove models without touching the
//! real cache).
#![allow(dead_code)]

use plumb_checkpoint::MetaValue;
use plumb_checkpoint::gguf::writer::GgufWriter;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The `plumb` binary under test.
pub fn plumb() -> Command {
    Command::new(env!("CARGO_BIN_EXE_plumb"))
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The default model in the real cache, pulled on first use (`plumb pull` prints its path).
pub fn model_path() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let out = plumb().arg("pull").output().unwrap();
        assert!(out.status.success(), "plumb pull failed: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let path = stdout.trim().rsplit(" ready at ").next().unwrap();
        PathBuf::from(path)
    })
}

/// A private plumb home whose `models/` links to the default model.
pub struct Home {
    pub dir: tempfile::TempDir,
}

impl Home {
    pub fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models");
        std::fs::create_dir_all(&models).unwrap();
        let model = model_path();
        let name = model.file_name().unwrap();
        std::os::unix::fs::symlink(model, models.join(name)).unwrap();
        // The stamp matches the link (same size and modification time), so nothing is re-hashed.
        let mut stamp = model.as_os_str().to_owned();
        stamp.push(".verified");
        if let Ok(s) = std::fs::read(&stamp) {
            let mut dest = models.join(name).into_os_string();
            dest.push(".verified");
            std::fs::write(dest, s).unwrap();
        }
        Home { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn models(&self) -> PathBuf {
        self.dir.path().join("models")
    }

    /// `plumb` with this home.
    pub fn plumb(&self) -> Command {
        let mut c = plumb();
        c.env("PLUMB_HOME", self.path());
        c
    }
}

/// A GGUF file that declares `architecture` and holds nothing else: no tokenizer, no
/// hyper-parameters, no tensors.
pub fn bare_gguf(path: &Path, architecture: &str) {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String(architecture.into()));
    w.meta("general.name", MetaValue::String(format!("synthetic {architecture}")));
    std::fs::write(path, w.to_bytes()).unwrap();
}
