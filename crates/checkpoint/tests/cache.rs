//! The model cache as `plumb list` and `plumb rm` see it, and what `--model` says about names
//! it cannot use (a directory, a Hugging Face repository id).

use plumb_checkpoint::source::{self, DEFAULT_MODEL, NoProgress, SourceError};
use std::path::Path;

fn touch(path: &Path, bytes: usize) {
    std::fs::write(path, vec![0u8; bytes]).unwrap();
}

#[test]
fn list_shows_gguf_files_only() {
    let home = tempfile::tempdir().unwrap();
    assert!(source::cached_models(home.path()).unwrap().is_empty(), "no models/ folder yet");
    let dir = source::models_dir(home.path());
    std::fs::create_dir_all(dir.join(".pull-1")).unwrap();
    touch(&dir.join("b.gguf"), 7);
    touch(&dir.join("b.gguf.verified"), 3);
    touch(&dir.join("a.gguf"), 5);
    touch(&dir.join("notes.txt"), 1);
    let listed: Vec<(String, u64)> = source::cached_models(home.path())
        .unwrap()
        .into_iter()
        .map(|m| (m.path.file_name().unwrap().to_string_lossy().into_owned(), m.size))
        .collect();
    assert_eq!(listed, [("a.gguf".to_string(), 5), ("b.gguf".to_string(), 7)]);
}

#[test]
fn rm_removes_the_file_and_its_stamp_by_any_name() {
    let home = tempfile::tempdir().unwrap();
    let dir = source::models_dir(home.path());
    std::fs::create_dir_all(&dir).unwrap();
    let default = dir.join(DEFAULT_MODEL.file_name);
    for spec in ["smollm2", "SmolLM2-135M-Instruct.Q4_1", "SmolLM2-135M-Instruct.Q4_1.gguf"] {
        touch(&default, 4);
        touch(&dir.join(format!("{}.verified", DEFAULT_MODEL.file_name)), 4);
        assert_eq!(source::remove_cached(spec, home.path()).unwrap(), default, "{spec}");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "{spec} left files behind");
    }
    touch(&dir.join("x.gguf"), 1);
    let by_path = dir.join("x.gguf");
    source::remove_cached(by_path.to_str().unwrap(), home.path()).unwrap();
    assert!(!by_path.exists());
    let err = source::remove_cached("x", home.path()).unwrap_err();
    assert!(matches!(err, SourceError::NotCached { .. }), "{err}");
    assert!(err.to_string().contains("plumb list"), "{err}");
}

#[test]
fn rm_removes_a_link_never_its_target() {
    let home = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("model.gguf");
    touch(&target, 9);
    let dir = source::models_dir(home.path());
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&target, dir.join("model.gguf")).unwrap();
    assert_eq!(source::cached_models(home.path()).unwrap()[0].size, 9);
    source::remove_cached("model", home.path()).unwrap();
    assert!(target.exists());
    assert!(source::cached_models(home.path()).unwrap().is_empty());
}

#[test]
fn rm_refuses_paths_outside_the_cache() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(source::models_dir(home.path())).unwrap();
    let outside = home.path().join("precious.gguf");
    touch(&outside, 1);
    for spec in [outside.to_str().unwrap(), "/etc/passwd", "../precious.gguf", ".."] {
        let err = source::remove_cached(spec, home.path()).unwrap_err();
        assert!(matches!(err, SourceError::OutsideCache { .. } | SourceError::NotCached { .. }), "{spec}: {err}");
    }
    let err = source::remove_cached(outside.to_str().unwrap(), home.path()).unwrap_err();
    assert!(err.to_string().contains("not in plumb's model cache"), "{err}");
    assert!(outside.exists());
}

#[test]
fn model_names_plumb_cannot_use_say_what_it_accepts() {
    let home = tempfile::tempdir().unwrap();
    let err = source::resolve_model(Some(home.path().to_str().unwrap()), home.path(), &NoProgress).unwrap_err();
    assert!(matches!(err, SourceError::IsDirectory { .. }), "{err}");
    assert!(err.to_string().contains("is a directory without a config.json"), "{err}");
    touch(&home.path().join("m.gguf"), 1);
    let err = source::resolve_model(Some(home.path().to_str().unwrap()), home.path(), &NoProgress).unwrap_err();
    assert!(err.to_string().contains("this one holds: m.gguf"), "{err}");
    let err = source::resolve_model(Some("HuggingFaceTB/SmolLM2-135M-Instruct"), home.path(), &NoProgress).unwrap_err();
    assert!(matches!(err, SourceError::HubName { .. }), "{err}");
    assert!(err.to_string().contains("does not download from the Hub"), "{err}");
    let err = source::resolve_model(Some("models/missing.gguf"), home.path(), &NoProgress).unwrap_err();
    assert!(matches!(err, SourceError::UnknownModel { .. }), "{err}");
}
