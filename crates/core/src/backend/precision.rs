//! The precisions a backend declares: how `linear` rounds its activation input and what element
//! type the KV cache stores. The gate measures a backend against float64 at these.

/// How `linear` rounds its activation input ([`super::Backend::linear_inputs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinearInputs {
    /// Activations enter the products as f32.
    F32,
    /// Each activation is rounded to bf16 (to nearest, ties to even) first; products and sums
    /// stay f32.
    Bf16,
    /// Each block of 32 activations of a row becomes int8 codes and one f32 scale
    /// ([`crate::q8`]), so the products can be integer dot products (llama.cpp's Q8 activations).
    Q8,
}

impl LinearInputs {
    /// Rows of activations (K a multiple of 32 for `Q8`) as the products see them, in float64,
    /// which holds every rounded value exactly.
    pub fn apply_f64(self, x: &[f32]) -> Vec<f64> {
        match self {
            LinearInputs::F32 => x.iter().map(|&v| v as f64).collect(),
            LinearInputs::Bf16 => x.iter().map(|&v| half::bf16::from_f32(v).to_f64()).collect(),
            LinearInputs::Q8 => crate::q8::round_trip_f64(x),
        }
    }

    /// `apply_f64` rounded back to f32 (exact for f32 and bf16; within half an f32 ulp for Q8).
    pub fn apply(self, x: &[f32]) -> Vec<f32> {
        self.apply_f64(x).into_iter().map(|v| v as f32).collect()
    }

    /// The name `--act-dtype` takes and receipts print: `f32`, `bf16`, `q8`.
    pub fn name(self) -> &'static str {
        match self {
            LinearInputs::F32 => "f32",
            LinearInputs::Bf16 => "bf16",
            LinearInputs::Q8 => "q8",
        }
    }
}

/// The element type a backend stores K and V in ([`super::Backend::kv_store`]): what attention reads
/// back of every cached position, whichever step wrote it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvStore {
    /// f32, as computed.
    #[default]
    F32,
    /// Each value rounded to IEEE half precision (to nearest, ties to even; beyond ±65504 it is
    /// ±inf, which the gate's NaN check then catches).
    F16,
    /// Each value rounded to bf16 (to nearest, ties to even).
    Bf16,
}

impl KvStore {
    /// `x` as attention reads it back.
    pub fn round(self, x: f32) -> f32 {
        match self {
            KvStore::F32 => x,
            KvStore::F16 => half::f16::from_f32(x).to_f32(),
            KvStore::Bf16 => half::bf16::from_f32(x).to_f32(),
        }
    }

    /// Bytes per stored value.
    pub fn bytes(self) -> usize {
        match self {
            KvStore::F32 => 4,
            KvStore::F16 | KvStore::Bf16 => 2,
        }
    }

    /// The name `--kv-dtype` takes and receipts print: `f32`, `f16`, `bf16`.
    pub fn name(self) -> &'static str {
        match self {
            KvStore::F32 => "f32",
            KvStore::F16 => "f16",
            KvStore::Bf16 => "bf16",
        }
    }

    /// The store named `name` (`f32`, `f16`, `bf16`).
    pub fn parse(name: &str) -> Option<KvStore> {
        [KvStore::F32, KvStore::F16, KvStore::Bf16].into_iter().find(|s| s.name() == name)
    }
}
