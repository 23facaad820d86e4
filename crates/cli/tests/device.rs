//! `--device`: without a GPU, `--device cuda` fails with one clear line and a non-zero exit,
//! before any model is looked for; commands that run on the CPU only say so.

use std::process::Command;

fn plumb(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_plumb")).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Whether this machine can start the CUDA backend at all (then the no-GPU errors cannot be seen).
fn has_gpu() -> bool {
    plumb_backend_cuda::CudaBackend::new(0).is_ok()
}

#[test]
fn cuda_without_a_gpu_fails_with_one_line() {
    if has_gpu() {
        eprintln!("skipped: this machine has a GPU");
        return;
    }
    for cmd in [
        &["run", "--device", "cuda", "hi"][..],
        &["bench", "--device", "cuda:0"],
        &["check", "--device", "cuda", "--quick"],
        &["serve", "--device", "cuda", "--port", "0"],
    ] {
        // A model that does not exist: the device is checked first, so this is never reached.
        let args: Vec<&str> = cmd.iter().copied().chain(["--model", "/nonexistent/model.gguf"]).collect();
        let (ok, err) = plumb(&args);
        assert!(!ok, "{args:?} succeeded");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: no CUDA") || err.starts_with("error: NVRTC"), "{args:?}: {err}");
    }
}

#[test]
fn cpu_only_commands_refuse_cuda_by_name() {
    let (ok, err) = plumb(&["chat", "--device", "cuda", "--model", "/nonexistent/model.gguf"]);
    assert!(!ok);
    assert!(err.contains("runs on the CPU only so far"), "{err}");
    let (ok, err) = plumb(&["run", "--device", "gpu", "hi"]);
    assert!(!ok);
    assert!(err.contains("unknown device `gpu`"), "{err}");
}

/// `--kv-dtype`: an element type plumb does not know is refused by name before any model is
/// looked for; a known one is taken on the CPU too (the model is then looked for, and missing).
#[test]
fn kv_dtype_is_refused_by_name_and_taken_by_the_cpu() {
    let (ok, err) = plumb(&["run", "--kv-dtype", "fp8", "hi"]);
    assert!(!ok);
    assert!(err.contains("`fp8` is not a KV element type"), "{err}");
    let (ok, err) = plumb(&["run", "--kv-dtype", "f16", "--model", "/nonexistent/model.gguf", "hi"]);
    assert!(!ok);
    assert!(!err.contains("kv-dtype"), "{err}");
    assert!(err.contains("/nonexistent/model.gguf"), "{err}");
}

/// `--act-dtype`: an unknown element type is refused by name; `q8` is taken on the CPU (the model
/// is then looked for) and refused on CUDA, which declares its own activation precision.
#[test]
fn act_dtype_is_refused_by_name_taken_by_the_cpu_and_refused_on_cuda() {
    let (ok, err) = plumb(&["run", "--act-dtype", "int4", "hi"]);
    assert!(!ok);
    assert!(err.contains("`int4` is not an activation element type"), "{err}");
    let (ok, err) = plumb(&["run", "--act-dtype", "q8", "--model", "/nonexistent/model.gguf", "hi"]);
    assert!(!ok);
    assert!(!err.contains("act-dtype"), "{err}");
    assert!(err.contains("/nonexistent/model.gguf"), "{err}");
    let (ok, err) = plumb(&["bench", "--device", "cuda", "--act-dtype", "q8", "--model", "/nonexistent/model.gguf"]);
    assert!(!ok);
    assert!(err.contains("--act-dtype q8 runs on the CPU only"), "{err}");
}
