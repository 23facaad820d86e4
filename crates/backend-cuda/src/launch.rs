//! A kernel launch as plain data (function, grid, block, argument values), so a step's launches
//! can be recorded, compared with the launches a CUDA graph was captured from, and replayed.
//! Owns no device memory: arguments are device addresses and scalars by value.
//! Invariant: executing a `Launch` is exactly the `cuLaunchKernel` its fields spell out, so two
//! equal launch lists compute the same thing — graph replay is taken only on equality.

use cudarc::driver::{CudaFunction, DriverError, LaunchConfig, result, sys};
use std::ffi::c_void;

/// The most arguments any kernel of `kernels/*.cu` takes.
const MAX_ARGS: usize = 12;

/// One kernel launch. Each argument sits in an 8-byte slot; the driver reads as many bytes as the
/// parameter's type has (4 for `int`/`float`, 8 for pointers and `u64`) from the slot's start,
/// which on a little-endian host is the value's own bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    func: usize,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    smem: u32,
    num_args: usize,
    args: [u64; MAX_ARGS],
}

impl Launch {
    pub fn new(f: &CudaFunction, cfg: LaunchConfig) -> Launch {
        Launch {
            func: f.cu_function() as usize,
            grid: cfg.grid_dim,
            block: cfg.block_dim,
            smem: cfg.shared_mem_bytes,
            num_args: 0,
            args: [0; MAX_ARGS],
        }
    }

    fn push(mut self, v: u64) -> Launch {
        assert!(self.num_args < MAX_ARGS, "a kernel takes more than {MAX_ARGS} arguments");
        self.args[self.num_args] = v;
        self.num_args += 1;
        self
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

    /// Queues the launch on `stream` (or records it into the graph `stream` is capturing).
    ///
    /// # Safety
    /// The arguments must match the kernel's parameter list, and every address must stay valid
    /// until the kernel has run.
    pub unsafe fn execute(&self, stream: sys::CUstream) -> Result<(), DriverError> {
        let mut vals = self.args;
        let mut params = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
        for (p, v) in params.iter_mut().zip(vals.iter_mut()) {
            *p = (v as *mut u64).cast();
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
