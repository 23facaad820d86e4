//! The CPU's paged K/V store: per layer, K and V as [num_kv_heads, num_slots, head_dim] in the
//! declared element type (`KvStore`: f32 as computed, or each value rounded to f16 / bf16 on
//! write, to nearest even, as `KvStore::round` defines). Head-major, so the rows one KV head's
//! attention reads are contiguous within a block (the hardware prefetchers stream them).
//! Invariant: what attention reads back of a position is exactly `KvStore::round` of what
//! `write` was given, whichever step wrote it.

use crate::simd::F32x16;
use plumb_core::{KvSpec, KvStore, LaneStateStore};

/// A stored K/V value and how the attention kernel widens sixteen of them to f32.
pub(crate) trait KvElem: Copy + Default + Send + Sync + 'static {
    /// `x` as stored.
    fn store(x: f32) -> Self;
    /// The f32 values of `row[at..at + 16]` (exact widening).
    fn vec<S: F32x16>(row: &[Self], at: usize) -> S;
    /// One value as f32 (exact widening).
    fn load(self) -> f32;
}

impl KvElem for f32 {
    #[inline(always)]
    fn store(x: f32) -> Self {
        x
    }
    #[inline(always)]
    fn vec<S: F32x16>(row: &[f32], at: usize) -> S {
        S::load(&row[at..])
    }
    #[inline(always)]
    fn load(self) -> f32 {
        self
    }
}

/// IEEE half precision bits.
#[derive(Clone, Copy, Debug, Default)]
#[repr(transparent)]
pub(crate) struct F16(u16);

/// bfloat16 bits.
#[derive(Clone, Copy, Debug, Default)]
#[repr(transparent)]
pub(crate) struct Bf16(u16);

/// The 32 bytes of sixteen 16-bit values `row[at..at + 16]`.
#[inline(always)]
fn bytes_of<T>(row: &[T], at: usize) -> &[u8] {
    assert!(std::mem::size_of::<T>() == 2);
    let s = &row[at..at + 16];
    // SAFETY: `T` is a `repr(transparent)` u16 (size checked above): sixteen of them are 32
    // initialized bytes, borrowed for as long as `row`.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), 32) }
}

impl KvElem for F16 {
    #[inline(always)]
    fn store(x: f32) -> Self {
        F16(half::f16::from_f32(x).to_bits())
    }
    #[inline(always)]
    fn vec<S: F32x16>(row: &[F16], at: usize) -> S {
        S::from_f16(bytes_of(row, at))
    }
    #[inline(always)]
    fn load(self) -> f32 {
        half::f16::from_bits(self.0).to_f32()
    }
}

impl KvElem for Bf16 {
    #[inline(always)]
    fn store(x: f32) -> Self {
        Bf16(half::bf16::from_f32(x).to_bits())
    }
    #[inline(always)]
    fn vec<S: F32x16>(row: &[Bf16], at: usize) -> S {
        S::from_bf16(bytes_of(row, at))
    }
    #[inline(always)]
    fn load(self) -> f32 {
        half::bf16::from_bits(self.0).to_f32()
    }
}

/// One element type's K and V for every layer.
#[derive(Debug)]
pub(crate) struct Planes<E> {
    pub k: Vec<Vec<E>>,
    pub v: Vec<Vec<E>>,
}

impl<E: KvElem> Planes<E> {
    fn new(layers: usize, per_layer: usize) -> Self {
        Planes {
            k: (0..layers).map(|_| vec![E::default(); per_layer]).collect(),
            v: (0..layers).map(|_| vec![E::default(); per_layer]).collect(),
        }
    }

    fn bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(Vec::capacity).sum::<usize>() * std::mem::size_of::<E>()
    }

    fn write(&mut self, spec: &KvSpec, layer: usize, k: &[f32], v: &[f32], slot_mapping: &[u32]) {
        let (hd, heads) = (spec.head_dim, spec.num_kv_heads);
        let head_len = head_len(spec);
        for (r, &slot) in slot_mapping.iter().enumerate() {
            for h in 0..heads {
                let (at, src) = (h * head_len + slot as usize * hd, (r * heads + h) * hd);
                for (dst, &x) in self.k[layer][at..at + hd].iter_mut().zip(&k[src..src + hd]) {
                    *dst = E::store(x);
                }
                for (dst, &x) in self.v[layer][at..at + hd].iter_mut().zip(&v[src..src + hd]) {
                    *dst = E::store(x);
                }
            }
        }
    }
}

impl<E: KvElem> Planes<E> {
    /// Columns `col ..` of the paged rows (`plumb_core::paged_segments`) at `slots` := `src`'s
    /// rows ([slots.len(), w]), each value stored as `E`. One KV head.
    fn write_rows(&mut self, spec: &KvSpec, first: usize, col: usize, slots: &[u32], src: &[f32]) {
        let w = src.len() / slots.len().max(1);
        let hd = spec.head_dim;
        for s in plumb_core::paged_segments(first, hd, col, w) {
            let plane = if s.v { &mut self.v[s.layer] } else { &mut self.k[s.layer] };
            for (r, &slot) in slots.iter().enumerate() {
                let at = slot as usize * hd + s.offset;
                for (dst, &x) in plane[at..at + s.len].iter_mut().zip(&src[r * w + s.from..]) {
                    *dst = E::store(x);
                }
            }
        }
    }

    /// `out`'s rows ([slots.len(), w]) := columns `col ..` of the paged rows at `slots`.
    fn read_rows(&self, spec: &KvSpec, first: usize, col: usize, slots: &[u32], out: &mut [f32]) {
        let w = out.len() / slots.len().max(1);
        let hd = spec.head_dim;
        for s in plumb_core::paged_segments(first, hd, col, w) {
            let plane = if s.v { &self.v[s.layer] } else { &self.k[s.layer] };
            for (r, &slot) in slots.iter().enumerate() {
                let at = slot as usize * hd + s.offset;
                for (dst, &x) in out[r * w + s.from..r * w + s.from + s.len].iter_mut().zip(&plane[at..at + s.len]) {
                    *dst = x.load();
                }
            }
        }
    }
}

/// The planes in the cache's element type.
#[derive(Debug)]
pub(crate) enum KvPlanes {
    F32(Planes<f32>),
    F16(Planes<F16>),
    Bf16(Planes<Bf16>),
}

/// K and V for every layer, and the per-lane state of linear-attention layers.
#[derive(Debug)]
pub struct CpuKvCache {
    pub spec: KvSpec,
    pub(crate) planes: KvPlanes,
    /// Per-lane state of the linear-attention layers (`KvSpec::lane_state`).
    pub lane_state: LaneStateStore<f32>,
}

/// Elements of one KV head's rows in a layer (all slots).
pub(crate) fn head_len(spec: &KvSpec) -> usize {
    spec.num_blocks * spec.block_size * spec.head_dim
}

impl CpuKvCache {
    /// Allocates zeroed storage of `store`'s element type; pages become resident only when
    /// written.
    pub fn new(spec: &KvSpec, store: KvStore) -> Self {
        let (layers, per_layer) = (spec.num_layers, spec.num_kv_heads * head_len(spec));
        let planes = match store {
            KvStore::F32 => KvPlanes::F32(Planes::new(layers, per_layer)),
            KvStore::F16 => KvPlanes::F16(Planes::new(layers, per_layer)),
            KvStore::Bf16 => KvPlanes::Bf16(Planes::new(layers, per_layer)),
        };
        CpuKvCache { spec: *spec, planes, lane_state: LaneStateStore::new(&spec.lane_state) }
    }

    /// The element type K and V are stored in.
    pub fn store(&self) -> KvStore {
        match self.planes {
            KvPlanes::F32(_) => KvStore::F32,
            KvPlanes::F16(_) => KvStore::F16,
            KvPlanes::Bf16(_) => KvStore::Bf16,
        }
    }

    /// Bytes its K/V buffers hold, as allocated (all layers, all blocks).
    pub fn kv_allocated_bytes(&self) -> usize {
        match &self.planes {
            KvPlanes::F32(p) => p.bytes(),
            KvPlanes::F16(p) => p.bytes(),
            KvPlanes::Bf16(p) => p.bytes(),
        }
    }

    /// Writes rows of K and V ([num_rows, num_kv_heads · head_dim]) at their slots, each value
    /// rounded to the store's element type.
    pub fn write(&mut self, layer: usize, k: &[f32], v: &[f32], slot_mapping: &[u32]) {
        let spec = self.spec;
        match &mut self.planes {
            KvPlanes::F32(p) => p.write(&spec, layer, k, v, slot_mapping),
            KvPlanes::F16(p) => p.write(&spec, layer, k, v, slot_mapping),
            KvPlanes::Bf16(p) => p.write(&spec, layer, k, v, slot_mapping),
        }
    }
}

impl CpuKvCache {
    /// Paged rows of a model's own layout (`CompressedAttentionOps::write_paged_rows`).
    pub fn write_rows(&mut self, first: usize, col: usize, slots: &[u32], src: &[f32]) {
        assert_eq!(self.spec.num_kv_heads, 1, "paged rows live in a one-head cache");
        assert!(src.len() == slots.len() * (src.len() / slots.len().max(1)), "paged rows: ragged source");
        let spec = self.spec;
        match &mut self.planes {
            KvPlanes::F32(p) => p.write_rows(&spec, first, col, slots, src),
            KvPlanes::F16(p) => p.write_rows(&spec, first, col, slots, src),
            KvPlanes::Bf16(p) => p.write_rows(&spec, first, col, slots, src),
        }
    }

    /// Paged rows of a model's own layout (`CompressedAttentionOps::read_paged_rows`).
    pub fn read_rows(&self, first: usize, col: usize, slots: &[u32], out: &mut [f32]) {
        assert_eq!(self.spec.num_kv_heads, 1, "paged rows live in a one-head cache");
        match &self.planes {
            KvPlanes::F32(p) => p.read_rows(&self.spec, first, col, slots, out),
            KvPlanes::F16(p) => p.read_rows(&self.spec, first, col, slots, out),
            KvPlanes::Bf16(p) => p.read_rows(&self.spec, first, col, slots, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::{Isa, simd_dispatch};
    use plumb_core::LaneStateSpec;

    simd_dispatch! {
        fn read_back(cache: &CpuKvCache, layer: usize, at: usize) -> [f32; 16] => read_back_kernel
    }

    #[inline(always)]
    fn read_back_kernel<S: F32x16>(cache: &CpuKvCache, layer: usize, at: usize) -> [f32; 16] {
        let mut out = [0f32; 16];
        match &cache.planes {
            KvPlanes::F32(p) => f32::vec::<S>(&p.k[layer], at).store(&mut out),
            KvPlanes::F16(p) => F16::vec::<S>(&p.k[layer], at).store(&mut out),
            KvPlanes::Bf16(p) => Bf16::vec::<S>(&p.k[layer], at).store(&mut out),
        }
        out
    }

    /// Every store reads back exactly `KvStore::round` of what was written, on every ISA
    /// (halfway cases, overflow to infinity, subnormals, NaN).
    #[test]
    fn a_stored_value_reads_back_as_its_declared_rounding() {
        let spec = KvSpec {
            num_layers: 2,
            num_kv_heads: 2,
            head_dim: 16,
            block_size: 4,
            num_blocks: 2,
            lane_state: LaneStateSpec::NONE,
        };
        let tricky = [
            1.0 + 2f32.powi(-11),
            1.0 + 3.0 * 2f32.powi(-11),
            70000.0,
            -65520.0,
            1e-7,
            -3e-8,
            f32::NAN,
            0.0,
            -0.0,
            1.0 + 2f32.powi(-8),
            1.0 + 3.0 * 2f32.powi(-8),
            3.25159,
            -2.61828,
            f32::INFINITY,
            6.1e-5,
            123.456,
        ];
        // Row 0 of slot 5: head 0 gets the tricky values, head 1 their negation.
        let k: Vec<f32> = tricky.iter().copied().chain(tricky.iter().map(|x| -x)).collect();
        for store in [KvStore::F32, KvStore::F16, KvStore::Bf16] {
            let mut cache = CpuKvCache::new(&spec, store);
            assert_eq!(cache.store(), store);
            cache.write(1, &k, &k, &[5]);
            for isa in Isa::available() {
                for h in 0..2 {
                    let got = read_back(isa, &cache, 1, h * head_len(&spec) + 5 * 16);
                    for (g, &x) in got.iter().zip(&k[h * 16..(h + 1) * 16]) {
                        let want = store.round(x);
                        assert!(
                            g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                            "{store:?} on {isa:?}: {x} read back as {g}, want {want}"
                        );
                    }
                }
            }
            assert_eq!(cache.kv_allocated_bytes(), 2 * 2 * 2 * 8 * 16 * store.bytes());
        }
    }
}
