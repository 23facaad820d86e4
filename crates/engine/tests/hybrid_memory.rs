//! Memory of a hybrid linear-attention model in the lanes engine (the tiny Qwen3.5 of
//! fixtures/qwen3_5: 3 Gated DeltaNet layers, 1 full-attention layer), measured: the KV cache
//! is allocated for the full-attention layer only, the lane state is the declared slots and
//! nothing more, and over 700 decode steps of one long request the live heap (counted by this
//! test binary's allocator) does not grow with the context — while the full-attention layer's
//! KV blocks in use do.

#[path = "support/hybrid.rs"]
mod hybrid;

use hybrid::{BASE, engine, prompt};
use plumb_backend_cpu::CpuBackend;
use plumb_engine::{Engine, Request};
use plumb_sampling::SamplingParams;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// The system allocator, counting live bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call forwards to the system allocator with the caller's arguments; the counter
// has no effect on allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is `GlobalAlloc::alloc`'s, passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn kv_only_for_full_attention_and_a_long_requests_state_stays_constant() {
    let mut e = engine(&BASE);
    let spec = *e.kv_spec();
    // What the cache allocated: K/V of one layer (2 KV heads × 32 × K and V × f32 = 512 bytes
    // per position), and per slot 3 layers × (conv 3 × 128 + recurrent 4 × 16 × 16) floats.
    assert_eq!((spec.num_layers, spec.lane_state.num_layers), (1, 3));
    assert_eq!(spec.bytes_per_position(), 512);
    assert_eq!(spec.lane_state.bytes_per_slot(), 3 * (3 * 128 + 4 * 16 * 16) * 4);
    let kv = e.kv_cache();
    assert_eq!(kv.kv_allocated_bytes(), spec.num_blocks * spec.block_size * spec.bytes_per_position());
    assert_eq!(kv.lane_state.allocated_bytes(), spec.lane_state.total_bytes());
    assert_eq!(spec.lane_state.num_slots, BASE.max_lanes + 1, "a slot per lane and one for scoring");

    let req =
        Request::new(prompt(100, 3), SamplingParams { temperature: 1.0, seed: 9, ..Default::default() }, 800, vec![]);
    let id = e.add_request(req).unwrap();
    // Steps until the request has `n` tokens computed: (live heap bytes, KV blocks in use).
    let at = |e: &mut Engine<CpuBackend>, n: usize| {
        while e.num_computed_tokens(id).is_some_and(|c| c < n) {
            e.step();
        }
        (LIVE.load(Ordering::Relaxed), e.stats().num_blocks_in_use)
    };
    let (live_150, blocks_150) = at(&mut e, 150);
    let (live_850, blocks_850) = at(&mut e, 850);
    let grown = live_850 - live_150;
    eprintln!(
        "live heap {live_150} B at context 150, {live_850} B at 850 (+{grown}); KV blocks {blocks_150} → {blocks_850}"
    );
    // The attention layer's KV grows 700 positions (44 blocks of 16, 358 KB of its buffer);
    // the linear-attention state must not: three layers' worth of per-token memory would be
    // 3 × 512 B × 700 = 1 MB. What may grow is bookkeeping (the token list: 4 B per token).
    assert_eq!(blocks_850 - blocks_150, 850usize.div_ceil(16) - 150usize.div_ceil(16));
    assert!(grown < 64 * 1024, "the live heap grew {grown} bytes over 700 decode steps");
    while e.has_work() {
        e.step();
    }
}
