//! Random inputs for conformance cases: a seeded generator and realistic tensors
//! (normal activations, rows spanning six orders of magnitude, cancelling pairs) and valid
//! quantized weight blocks (random bits with finite, small f16 scales).

use plumb_core::GgmlType;

/// SplitMix64: small, seedable, good enough for test inputs.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u = self.uniform().max(1e-300);
        let v = self.uniform();
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.uniform() * n as f64) as usize
    }
}

/// The shape of values a case draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    /// N(0, 1).
    Normal,
    /// Each row scaled by 10^u, u uniform in [-3, 3].
    DynamicRange,
    /// The second half of each row negates the first half plus 1e-3 noise, so sums nearly cancel.
    Cancelling,
}

/// [rows, cols] values with the given spread.
pub fn activations(rng: &mut Rng, rows: usize, cols: usize, spread: Spread) -> Vec<f32> {
    let mut v = Vec::with_capacity(rows * cols);
    for _ in 0..rows {
        let scale = match spread {
            Spread::DynamicRange => 10f64.powf(rng.uniform() * 6.0 - 3.0),
            _ => 1.0,
        };
        let mut row: Vec<f64> = (0..cols).map(|_| rng.normal() * scale).collect();
        if spread == Spread::Cancelling {
            let half = cols / 2;
            for j in 0..half {
                row[half + j] = -row[j] + 1e-3 * rng.normal();
            }
        }
        v.extend(row.into_iter().map(|x| x as f32));
    }
    v
}

/// `rows` rows of `cols` elements of `ty`: random bits, every f16 scale finite with magnitude
/// around 1e-3..1e-1 (the scale of real weights), f16/bf16/f32 values normal with std 0.05.
pub fn weight_bytes(rng: &mut Rng, ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let info = ty.info().expect("dequantizable types have geometry");
    let n = rows * cols;
    match ty {
        GgmlType::F32 => (0..n).flat_map(|_| ((rng.normal() * 0.05) as f32).to_le_bytes()).collect(),
        GgmlType::F16 => (0..n).flat_map(|_| half_bits(rng.normal() * 0.05).to_le_bytes()).collect(),
        GgmlType::BF16 => {
            (0..n).flat_map(|_| ((((rng.normal() * 0.05) as f32).to_bits() >> 16) as u16).to_le_bytes()).collect()
        }
        _ => {
            let num_blocks = n / info.block_elems;
            let mut bytes: Vec<u8> = (0..num_blocks * info.block_bytes).map(|_| rng.next_u64() as u8).collect();
            for block in bytes.chunks_exact_mut(info.block_bytes) {
                for &at in plumb_core::quant::f16_field_offsets(ty) {
                    let scale = (rng.uniform() * 2.0 - 1.0) * 10f64.powf(-1.0 - 2.0 * rng.uniform()) / 16.0;
                    block[at..at + 2].copy_from_slice(&half_bits(scale).to_le_bytes());
                }
            }
            bytes
        }
    }
}

/// The nearest f16 bit pattern of `x` (|x| well inside the f16 range; ties away, good enough for inputs).
fn half_bits(x: f64) -> u16 {
    let f = x as f32;
    let bits = f.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let a = f.abs();
    if a < 6.0e-8 {
        return sign;
    }
    if a < 6.103_515_6e-5 {
        return sign | (a / 5.960_464_5e-8).round() as u16;
    }
    let exp = ((a.to_bits() >> 23) as i32 - 127 + 15) as u16;
    let man = ((a.to_bits() >> 13) & 0x3FF) as u16;
    sign | (exp << 10) | man
}
