//! A kernel launch as plain data (function, grid, block, argument values), so a step's launches
//! can be recorded, compared with the launches a CUDA graph was captured from, and replayed.
//! Owns no device memory: arguments are device addresses and scalars by value.
//! Invariant: executing a `Launch` is exactly the `cuLaunchKernel` its fields spell out, so two
//! equal launch lists compute the same thing — graph replay is taken only on equality.

use cudarc::driver::{CudaFunction, DriverError, LaunchConfig, result, sys};
use std::ffi::c_void;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether launches carry programmatic stream serialization (sm_90 and later): a kernel may be
/// scheduled while the one before it finishes, and waits at its first statement (`PDL_ENTRY` in
/// kernels/dequant.cu) until that kernel's writes are visible. Set once by `CudaBackend::new`
/// (`PLUMB_CUDA_PDL=0` turns it off); changes no result, only launch latency.
static PDL: AtomicBool = AtomicBool::new(false);

pub(crate) fn set_pdl(on: bool) {
    PDL.store(on, Ordering::Relaxed);
}

pub(crate) fn pdl() -> bool {
    PDL.load(Ordering::Relaxed)
}

/// Kernels (by CUfunction address) launched without programmatic serialization even where PDL
/// is on (`PLUMB_CUDA_PDL_OFF=NAME,...`, for measuring which early launches pay): such a kernel
/// starts only once the one before it has completed. Changes no result.
/// `PDL_OFF_ANY` says whether the list holds any, so a launch reads the lock only then.
static PDL_OFF: RwLock<Vec<usize>> = RwLock::new(Vec::new());
static PDL_OFF_ANY: AtomicBool = AtomicBool::new(false);

pub(crate) fn set_pdl_off(funcs: Vec<usize>) {
    let any = !funcs.is_empty();
    *PDL_OFF.write().unwrap_or_else(|e| e.into_inner()) = funcs;
    PDL_OFF_ANY.store(any, Ordering::Relaxed);
}

/// Whether `PLUMB_CUDA_PDL_OFF` named any kernel.
pub(crate) fn pdl_off_any() -> bool {
    PDL_OFF_ANY.load(Ordering::Relaxed)
}

/// The most arguments any kernel of `kernels/*.cu` takes (the CUDA-core `linear`, with its fused
/// norm, residual and RoPE/KV arguments: 25), and the 8-byte slots they fill (the TMA `linear`
/// takes four tensor maps of 16 slots each: 76 slots).
const MAX_ARGS: usize = 28;
const MAX_SLOTS: usize = 80;

/// One kernel launch. Each argument starts an 8-byte slot; the driver reads as many bytes as the
/// parameter's type has (4 for `int`/`float`, 8 for pointers and `u64`, 128 for a tensor map,
/// which fills 16 slots) from the slot's start, which on a little-endian host is the value's own
/// bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    func: usize,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    smem: u32,
    /// CTAs per cluster along x (1: no cluster).
    cluster: u32,
    num_args: usize,
    num_slots: usize,
    starts: [u8; MAX_ARGS],
    slots: [u64; MAX_SLOTS],
}

impl Launch {
    pub fn new(f: &CudaFunction, cfg: LaunchConfig) -> Launch {
        Launch {
            func: f.cu_function() as usize,
            grid: cfg.grid_dim,
            block: cfg.block_dim,
            smem: cfg.shared_mem_bytes,
            cluster: 1,
            num_args: 0,
            num_slots: 0,
            starts: [0; MAX_ARGS],
            slots: [0; MAX_SLOTS],
        }
    }

    fn push_slots(mut self, v: &[u64]) -> Launch {
        assert!(self.num_args < MAX_ARGS, "a kernel takes more than {MAX_ARGS} arguments");
        assert!(self.num_slots + v.len() <= MAX_SLOTS, "a kernel's arguments fill more than {MAX_SLOTS} slots");
        self.starts[self.num_args] = self.num_slots as u8;
        self.slots[self.num_slots..self.num_slots + v.len()].copy_from_slice(v);
        self.num_args += 1;
        self.num_slots += v.len();
        self
    }

    fn push(self, v: u64) -> Launch {
        self.push_slots(&[v])
    }

    /// Runs the grid's blocks in clusters of `n` along x (the grid a multiple of it).
    pub fn cluster(mut self, n: u32) -> Launch {
        assert!(n >= 1 && self.grid.0.is_multiple_of(n), "a grid of {} blocks in clusters of {n}", self.grid.0);
        self.cluster = n;
        self
    }

    /// A TMA tensor map (`const __grid_constant__ TmaMap`, 128 bytes by value).
    pub fn tensor_map(self, map: &sys::CUtensorMap) -> Launch {
        self.push_slots(&map.opaque)
    }

    /// The kernel (its CUfunction, as an address).
    pub fn func(&self) -> usize {
        self.func
    }

    /// A device address (`T*`).
    pub fn ptr(self, p: u64) -> Launch {
        self.push(p)
    }

    pub fn i32(self, v: i32) -> Launch {
        self.push(v as u32 as u64)
    }

    pub fn u64(self, v: u64) -> Launch {
        self.push(v)
    }

    pub fn f32(self, v: f32) -> Launch {
        self.push(v.to_bits() as u64)
    }

    /// What first differs between this launch and `other`, in words ("kernel", "grid", "block",
    /// "shared memory", "argument count", "argument N"), or None when they are equal: why a
    /// recorded step did not replay its graph (`graph::first_difference`).
    pub fn difference(&self, other: &Launch) -> Option<String> {
        if self == other {
            return None;
        }
        if self.func != other.func {
            return Some("kernel".into());
        }
        if self.grid != other.grid {
            return Some(format!("grid {:?} against {:?}", self.grid, other.grid));
        }
        if self.block != other.block {
            return Some("block".into());
        }
        if self.cluster != other.cluster {
            return Some("cluster".into());
        }
        if self.smem != other.smem {
            return Some("shared memory".into());
        }
        if (self.num_args, self.num_slots) != (other.num_args, other.num_slots) {
            return Some("argument count".into());
        }
        let end = |i: usize| if i + 1 < self.num_args { self.starts[i + 1] as usize } else { self.num_slots };
        (0..self.num_args)
            .find(|&i| {
                let range = self.starts[i] as usize..end(i);
                self.starts[i] != other.starts[i] || self.slots[range.clone()] != other.slots[range]
            })
            .map(|i| format!("argument {i}"))
    }

    /// Queues the launch on `stream` (or records it into the graph `stream` is capturing).
    ///
    /// # Safety
    /// The arguments must match the kernel's parameter list, and every address must stay valid
    /// until the kernel has run.
    pub unsafe fn execute(&self, stream: sys::CUstream) -> Result<(), DriverError> {
        let mut vals = self.slots;
        let mut params = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
        for (p, &start) in params.iter_mut().zip(&self.starts[..self.num_args]) {
            *p = (&mut vals[start as usize] as *mut u64).cast();
        }
        let pdl = PDL.load(Ordering::Relaxed)
            && !(pdl_off_any() && PDL_OFF.read().unwrap_or_else(|e| e.into_inner()).contains(&self.func));
        if pdl || self.cluster > 1 {
            let mut attrs = [sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                value: sys::CUlaunchAttributeValue { programmaticStreamSerializationAllowed: pdl as i32 },
            }; 2];
            attrs[1].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[1].value = sys::CUlaunchAttributeValue {
                clusterDim: sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x: self.cluster, y: 1, z: 1 },
            };
            let config = sys::CUlaunchConfig {
                gridDimX: self.grid.0,
                gridDimY: self.grid.1,
                gridDimZ: self.grid.2,
                blockDimX: self.block.0,
                blockDimY: self.block.1,
                blockDimZ: self.block.2,
                sharedMemBytes: self.smem,
                hStream: stream,
                attrs: attrs.as_mut_ptr(),
                numAttrs: if self.cluster > 1 { 2 } else { 1 },
            };
            // SAFETY: as below; `config` and `attrs` are live locals for the call.
            return unsafe {
                sys::cuLaunchKernelEx(&config, self.func as sys::CUfunction, params.as_mut_ptr(), std::ptr::null_mut())
                    .result()
            };
        }
        // SAFETY: `params[..num_args]` point at live locals holding each argument's value; the
        // caller vouches for the argument list and the addresses (see above).
        unsafe {
            result::launch_kernel(
                self.func as sys::CUfunction,
                self.grid,
                self.block,
                self.smem,
                stream,
                &mut params[..self.num_args],
            )
        }
    }
}

/// A launch of the kernel at address `func` on `grid` blocks, made without a device (tests).
#[cfg(test)]
pub(crate) fn test_launch(func: usize, grid: u32) -> Launch {
    Launch {
        func,
        grid: (grid, 1, 1),
        block: (128, 1, 1),
        smem: 0,
        cluster: 1,
        num_args: 0,
        num_slots: 0,
        starts: [0; MAX_ARGS],
        slots: [0; MAX_SLOTS],
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_ARGS, MAX_SLOTS, test_launch as launch};

    #[test]
    fn a_difference_names_the_first_field_that_differs() {
        let map = cudarc::driver::sys::CUtensorMap { opaque: [7; 16] };
        let a = launch(1, 4).ptr(0x1000).tensor_map(&map).i32(3).f32(0.5);
        assert_eq!(a.difference(&a), None);
        assert_eq!(a.difference(&launch(2, 4).ptr(0x1000).tensor_map(&map).i32(3).f32(0.5)).as_deref(), Some("kernel"));
        assert!(a.difference(&launch(1, 5).ptr(0x1000).tensor_map(&map).i32(3).f32(0.5)).unwrap().starts_with("grid"));
        assert_eq!(a.difference(&launch(1, 4).ptr(0x1000).tensor_map(&map).i32(3)).as_deref(), Some("argument count"));
        assert_eq!(
            a.difference(&launch(1, 4).ptr(0x2000).tensor_map(&map).i32(3).f32(0.5)).as_deref(),
            Some("argument 0")
        );
        let other_map = cudarc::driver::sys::CUtensorMap { opaque: [8; 16] };
        let b = launch(1, 4).ptr(0x1000).tensor_map(&other_map).i32(3).f32(0.5);
        assert_eq!(a.difference(&b).as_deref(), Some("argument 1"));
        assert_eq!(
            a.difference(&launch(1, 4).ptr(0x1000).tensor_map(&map).i32(4).f32(0.5)).as_deref(),
            Some("argument 2")
        );
        assert_eq!(
            a.difference(&launch(1, 4).ptr(0x1000).tensor_map(&map).i32(3).f32(1.5)).as_deref(),
            Some("argument 3")
        );
    }

    /// The parameter counts of every `__global__` function in `src`, macro bodies included.
    fn parameter_counts(src: &str) -> Vec<(String, usize)> {
        parameter_slots(src).into_iter().map(|(name, n, _)| (name, n)).collect()
    }

    /// Every `__global__` function in `src` with its parameter count and the 8-byte slots its
    /// arguments fill in a `Launch` (a `TmaMap` fills 16, anything else one).
    fn parameter_slots(src: &str) -> Vec<(String, usize, usize)> {
        let src = src.replace("\\\n", " ");
        let mut out = Vec::new();
        for part in src.split("__global__").skip(1) {
            let mut rest = part.trim_start().trim_start_matches("void").trim_start();
            if let Some(bounds) = rest.strip_prefix("__launch_bounds__") {
                rest = &bounds[bounds.find(')').expect("__launch_bounds__ closes") + 1..];
            }
            let open = rest.find('(').expect("a kernel has a parameter list");
            let name = rest[..open].trim().to_string();
            let (mut depth, mut commas, mut close) = (0, 0, None);
            for (i, c) in rest[open..].char_indices() {
                match c {
                    '(' | '<' => depth += 1,
                    ')' | '>' => {
                        depth -= 1;
                        if depth == 0 && c == ')' {
                            close = Some(i);
                            break;
                        }
                    }
                    ',' if depth == 1 => commas += 1,
                    _ => {}
                }
            }
            let params = &rest[open + 1..open + close.expect("the parameter list closes")];
            let n = if params.trim().is_empty() { 0 } else { commas + 1 };
            out.push((name, n, n + 15 * params.matches("TmaMap").count()));
        }
        out
    }

    #[test]
    fn every_kernel_fits_a_launchs_argument_slots() {
        let counts: Vec<_> = crate::compile::SOURCE.iter().flat_map(|s| parameter_slots(s)).collect();
        assert!(counts.len() >= 20, "found only {} kernels: the scan is broken", counts.len());
        for (name, n, slots) in &counts {
            assert!(*n <= MAX_ARGS, "kernel {name} takes {n} arguments, a Launch holds {MAX_ARGS}");
            assert!(*slots <= MAX_SLOTS, "kernel {name}'s arguments fill {slots} slots, a Launch holds {MAX_SLOTS}");
        }
        assert!(counts.iter().any(|(_, _, slots)| *slots > 64), "the TMA kernels' maps were not counted");
    }

    /// Whether `name` is what the kernel `scanned` defines: the same name, or, for a kernel a
    /// macro stamps out (`prefix_##A##_##B`), a name with the same fixed text around the pasted parts.
    fn defines(scanned: &str, name: &str) -> bool {
        let mut pieces = scanned.split("##");
        let first = pieces.next().unwrap_or("");
        let Some(mut rest) = name.strip_prefix(first) else { return false };
        if !scanned.contains("##") {
            return rest.is_empty();
        }
        // Odd pieces are macro parameters (anything but empty); even ones are fixed text.
        for (i, piece) in pieces.enumerate() {
            if i % 2 == 1 {
                match rest.find(piece) {
                    Some(at) if at > 0 => rest = &rest[at + piece.len()..],
                    _ => return false,
                }
            }
        }
        !rest.is_empty() || scanned.ends_with("##")
    }

    #[test]
    fn every_kernel_the_backend_loads_is_defined() {
        let scanned: Vec<String> =
            crate::compile::SOURCE.iter().flat_map(|s| parameter_counts(s)).map(|(name, _)| name).collect();
        for name in crate::kernel_set::kernel_names() {
            assert!(scanned.iter().any(|s| defines(s, &name)), "kernel {name} is loaded but no source defines it");
        }
        assert!(defines("attention_mma_##HD##_##NAME", "attention_mma_128_f16"));
        assert!(!defines("attention_mma_##HD##_##NAME", "attention_merge"));
        assert!(!defines("rope", "rope_qk"));
    }

    #[test]
    fn the_scan_counts_parameters_through_macros_and_bounds() {
        let src = "extern \"C\" __global__ void __launch_bounds__(128) k_##HD(const float* a, \\\n int b, \
                   float c) {}\n__global__ void plain() {}";
        assert_eq!(parameter_counts(src), [("k_##HD".to_string(), 3), ("plain".to_string(), 0)]);
        let maps = "__global__ void t(const __grid_constant__ TmaMap a, const __grid_constant__ TmaMap b, int c) {}";
        assert_eq!(parameter_slots(maps), [("t".to_string(), 3, 33)]);
    }
}
