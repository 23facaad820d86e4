//! NVRTC compilation of the kernel sources for the device's own architecture (`sm_90a` on Hopper),
//! with an on-disk cache of the resulting CUBIN keyed by a hash of the source, the options, the
//! NVRTC version and the architecture. Owns nothing on the device; `lib.rs` loads the module.
//! Invariant: a cached image is used only when every input to the compile is the same.

use crate::{CudaBackend, CudaError};
use cudarc::nvrtc::sys;
use sha2::{Digest, Sha256};
use std::ffi::{CStr, CString, c_char, c_int};
use std::path::PathBuf;

/// The kernel sources, concatenated into one module (dequantization first: the others use it).
pub const SOURCE: [&str; 17] = [
    include_str!("kernels/dequant.cu"),
    include_str!("kernels/kv_store.cu"),
    include_str!("kernels/linear.cu"),
    include_str!("kernels/linear_tile.cu"),
    include_str!("kernels/linear_mma.cu"),
    include_str!("kernels/linear_replay.cu"),
    include_str!("kernels/linear_wgmma.cu"),
    include_str!("kernels/linear_tma_norm.cu"),
    include_str!("kernels/linear_tma_fold.cu"),
    include_str!("kernels/linear_tma_sync.cu"),
    include_str!("kernels/linear_tma.cu"),
    include_str!("kernels/linear_tma_instances.cu"),
    include_str!("kernels/elementwise.cu"),
    include_str!("kernels/attention.cu"),
    include_str!("kernels/attention_mma.cu"),
    include_str!("kernels/attention_wgmma.cu"),
    include_str!("kernels/pick.cu"),
];

/// The compile options every kernel is built with. `--fmad=false`: no multiply-add is contracted
/// behind the source's back, so each kernel's roundings are exactly the ones it spells out.
/// `PLUMB_CUDA_EARLY_WEIGHTS=0` compiles the `linear` kernels to read weights only after waiting
/// on the kernel before (dequant.cu, `PLUMB_LATE_WEIGHTS`), for measuring; the same bits either way.
/// `PLUMB_CUDA_NORM_RELEASE=late` compiles the norm kernels to let the kernel after them be
/// scheduled only once their stores are issued (elementwise.cu, `PLUMB_NORM_LATE_RELEASE`), for
/// measuring; the same bits either way.
/// `PLUMB_CUDA_TIMELINE` compiles in the blocks' time stamps (`timeline.rs`; the same bits).
fn options(arch: &str) -> Vec<String> {
    let mut opts = vec![
        format!("--gpu-architecture={arch}"),
        "--fmad=false".into(),
        "--std=c++17".into(),
        "-default-device".into(),
    ];
    if !early_weights() {
        opts.push("-DPLUMB_LATE_WEIGHTS".into());
    }
    if norm_late_release() {
        opts.push("-DPLUMB_NORM_LATE_RELEASE".into());
    }
    if crate::timeline::wanted() {
        opts.push("-DPLUMB_TIMELINE".into());
    }
    opts
}

/// Whether the `linear` kernels read their first weight bytes before waiting on the kernel before
/// them (programmatic launch; `PLUMB_CUDA_EARLY_WEIGHTS=0` turns it off).
pub fn early_weights() -> bool {
    std::env::var("PLUMB_CUDA_EARLY_WEIGHTS").ok().is_none_or(|v| v != "0")
}

/// Whether the norm kernels release the kernel after them (`griddepcontrol.launch_dependents`)
/// only after their stores rather than right after their wait (`PLUMB_CUDA_NORM_RELEASE=late`).
/// Early, the next `linear`'s blocks become resident and stream their first weight bytes while
/// the one-block norm of a decode row runs, and its loads queue behind theirs.
pub fn norm_late_release() -> bool {
    std::env::var("PLUMB_CUDA_NORM_RELEASE").is_ok_and(|v| v == "late")
}

/// NVRTC's target name for a compute capability: the arch-specific `a` variant where one exists
/// (Hopper's wgmma and setmaxnreg live there), else the plain one.
pub fn arch_name(major: i32, minor: i32) -> String {
    if (major, minor) == (9, 0) || major >= 10 { format!("sm_{major}{minor}a") } else { format!("sm_{major}{minor}") }
}

/// Where compiled kernels are kept: $PLUMB_HOME/kernels, else $XDG_CACHE_HOME/plumb/kernels,
/// else ~/.cache/plumb/kernels (the same home the rest of plumb uses).
fn cache_dir() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let home = var("PLUMB_HOME")
        .or_else(|| var("XDG_CACHE_HOME").map(|x| x.join("plumb")))
        .or_else(|| var("HOME").map(|h| h.join(".cache").join("plumb")))?;
    Some(home.join("kernels"))
}

/// NVRTC's version as (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loaded (checked by the caller); the out-pointers are valid locals.
    let r = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    check(r, "asking NVRTC's version", None)?;
    Ok((major, minor))
}

/// The CUBIN for `arch`, from the disk cache or freshly compiled (and then cached).
/// Returns the image and whether it came from the cache.
pub fn cubin(arch: &str) -> Result<(Vec<u8>, bool), CudaError> {
    let source = SOURCE.concat();
    let opts = options(arch);
    let (major, minor) = nvrtc_version()?;
    let mut hasher = Sha256::new();
    hasher.update(source.as_bytes());
    hasher.update(opts.join("\n").as_bytes());
    hasher.update(format!("nvrtc {major}.{minor}").as_bytes());
    let key: String = hasher.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect();
    let path = cache_dir().map(|d| d.join(format!("{key}-{arch}.cubin")));
    if let Some(image) = path.as_ref().and_then(|p| std::fs::read(p).ok()) {
        return Ok((image, true));
    }
    let (image, _) = compile(&source, &opts, arch)?;
    if let Some(p) = &path {
        // A cache that cannot be written only costs a compile next time; it is never an error.
        let _ = p.parent().map(std::fs::create_dir_all);
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &image).is_ok() {
            let _ = std::fs::rename(&tmp, p);
        }
    }
    Ok((image, false))
}

fn check(r: sys::nvrtcResult, during: &'static str, log: Option<String>) -> Result<(), CudaError> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    Err(CudaError::Nvrtc { during, code: format!("{r:?}"), log: log.unwrap_or_default() })
}

/// A fresh compile's log (never the cache): what NVRTC and ptxas said of the kernels, warnings
/// and ptxas's notes included (the tests read the wgmma pipelines' from it).
pub fn log(arch: &str) -> Result<String, CudaError> {
    compile(&SOURCE.concat(), &options(arch), arch).map(|(_, log)| log)
}

/// Compiles `source` with `opts` and returns the CUBIN and the compile's log.
fn compile(source: &str, opts: &[String], arch: &str) -> Result<(Vec<u8>, String), CudaError> {
    let src = CString::new(source).expect("kernel sources hold no NUL byte");
    let name = CString::new("plumb_kernels.cu").expect("no NUL");
    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: `src` and `name` are NUL-terminated and outlive the call; no headers are passed.
    let r = unsafe {
        sys::nvrtcCreateProgram(&mut prog, src.as_ptr(), name.as_ptr(), 0, std::ptr::null(), std::ptr::null())
    };
    check(r, "creating the NVRTC program", None)?;
    let c_opts: Vec<CString> = opts.iter().map(|o| CString::new(o.as_str()).expect("no NUL")).collect();
    let ptrs: Vec<*const c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: `prog` was created above; `ptrs` holds `ptrs.len()` valid C strings kept alive by `c_opts`.
    let r = unsafe { sys::nvrtcCompileProgram(prog, ptrs.len() as c_int, ptrs.as_ptr()) };
    let result = if r == sys::nvrtcResult::NVRTC_SUCCESS {
        read_cubin(prog).map(|image| (image, program_log(prog)))
    } else {
        Err(CudaError::Nvrtc {
            during: "compiling the kernels",
            code: format!("{r:?} ({arch})"),
            log: program_log(prog),
        })
    };
    // SAFETY: `prog` is a live program and is not used after this.
    unsafe { sys::nvrtcDestroyProgram(&mut prog) };
    result
}

fn read_cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>, CudaError> {
    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully; `size` is a valid out-pointer.
    check(unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) }, "sizing the CUBIN", None)?;
    let mut image = vec![0u8; size];
    // SAFETY: `image` has exactly the `size` bytes NVRTC asked for.
    check(unsafe { sys::nvrtcGetCUBIN(prog, image.as_mut_ptr().cast()) }, "reading the CUBIN", None)?;
    Ok(image)
}

fn program_log(prog: sys::nvrtcProgram) -> String {
    let mut size = 0usize;
    // SAFETY: `prog` is a live program; `size` is a valid out-pointer.
    if unsafe { sys::nvrtcGetProgramLogSize(prog, &mut size) } != sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
        return String::new();
    }
    let mut log = vec![0u8; size];
    // SAFETY: `log` has the `size` bytes (NUL included) NVRTC asked for.
    if unsafe { sys::nvrtcGetProgramLog(prog, log.as_mut_ptr().cast()) } != sys::nvrtcResult::NVRTC_SUCCESS {
        return String::new();
    }
    CStr::from_bytes_until_nul(&log).map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
}

/// `CudaError::NoNvrtc` unless NVRTC loads by its standard names.
pub(crate) fn nvrtc_present() -> Result<(), CudaError> {
    // SAFETY: probing loads NVRTC by its standard names; nothing else is called.
    if unsafe { sys::is_culib_present() } { Ok(()) } else { Err(CudaError::NoNvrtc) }
}

/// Compiles without a device: the backend's kernels, their log, and probes' own sources.
impl CudaBackend {
    /// The kernel module compiled for `arch` (e.g. `sm_90a`) with no device involved: checks that
    /// the sources compile wherever NVRTC is installed. Returns the CUBIN and whether it came
    /// from the disk cache.
    pub fn compile_kernels(arch: &str) -> Result<(Vec<u8>, bool), CudaError> {
        nvrtc_present()?;
        cubin(arch)
    }

    /// A fresh compile's log for `arch` (no cache): NVRTC's warnings and ptxas's notes, such as
    /// a kernel whose wgmma it serialized. `CudaError::NoNvrtc` where NVRTC is not installed.
    pub fn kernel_compile_log(arch: &str) -> Result<String, CudaError> {
        nvrtc_present()?;
        log(arch)
    }

    /// A probe's own CUDA source (an example's or a test's, not the backend's kernels) compiled
    /// for a device of compute capability `major.minor` (its `arch_name`) with the backend's base
    /// options (no FMA contraction, C++17) and none of its switches: the CUBIN, which
    /// `Ptx::from_binary` loads, so a probe runs wherever the backend's kernels do (the CPU
    /// emulator included, which has no PTX). `CudaError::NoNvrtc` without NVRTC.
    pub fn compile_probe(source: &str, major: i32, minor: i32) -> Result<Vec<u8>, CudaError> {
        nvrtc_present()?;
        let arch = arch_name(major, minor);
        let opts = [format!("--gpu-architecture={arch}"), "--fmad=false".into(), "--std=c++17".into()];
        compile(source, &opts, &arch).map(|(image, _)| image)
    }
}
