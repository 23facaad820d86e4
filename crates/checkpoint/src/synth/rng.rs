//! The random numbers of synthetic weights: a splitmix64 stream per (seed, tensor, chunk), and a
//! bell-shaped value of a given standard deviation from each 64-bit draw.
//! Invariant: only integer arithmetic and exactly rounded float operations are used, so the same
//! seed gives the same bytes on every machine, whatever the thread count or the libm.

/// Elements per independently seeded chunk: chunks can be filled on any thread in any order.
pub const CHUNK_ELEMS: usize = 1 << 16;

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// splitmix64's output mix: a bijection of u64 that spreads every input bit.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a of a tensor name: the stream of a tensor depends on its name, not its position.
pub fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3))
}

/// A splitmix64 stream.
#[derive(Clone, Debug)]
pub struct Stream {
    state: u64,
}

impl Stream {
    /// The stream of chunk `chunk_idx` of the tensor whose name hashes to `name_hash`.
    pub fn for_chunk(seed: u64, name_hash: u64, chunk_idx: u64) -> Self {
        Stream { state: mix64(mix64(seed ^ mix64(name_hash)) ^ chunk_idx.wrapping_mul(GOLDEN)) }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix64(self.state)
    }

    /// One value of the distribution `bell` describes (mean 0).
    pub fn bell(&mut self, bell: &Bell) -> f32 {
        let r = self.next_u64();
        let sum = (r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48);
        // sum + 2 - 131072 is (Σ (uᵢ + ½) − 4·32768): centred, exact in f32 (|x| < 2^18).
        (sum as f32 + 2.0 - 131_072.0) * bell.scale
    }
}

/// The Irwin–Hall sum of four uniforms (each from 16 bits of one draw), scaled to a standard
/// deviation: close to a normal, bounded at ±2√3 σ.
#[derive(Clone, Copy, Debug)]
pub struct Bell {
    scale: f32,
}

impl Bell {
    pub fn with_std(std: f64) -> Self {
        // Σ of 4 uniforms on [0, 1) has variance 4/12; the sum is in units of 1/65536.
        Bell { scale: (std * 3f64.sqrt() / 65_536.0) as f32 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bell_has_the_asked_mean_and_deviation() {
        let bell = Bell::with_std(0.25);
        let mut s = Stream::for_chunk(7, name_hash("w"), 0);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| s.bell(&bell) as f64).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let std = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        assert!(mean.abs() < 0.005, "mean {mean}");
        assert!((std - 0.25).abs() < 0.005, "std {std}");
        let bound = 0.25 * 2.0 * 3f64.sqrt();
        assert!(xs.iter().all(|x| x.abs() <= bound), "bounded at 2√3 σ");
    }

    #[test]
    fn streams_differ_by_seed_name_and_chunk() {
        let first = |seed, name, chunk| Stream::for_chunk(seed, name_hash(name), chunk).next_u64();
        let base = first(1, "a", 0);
        assert_eq!(base, first(1, "a", 0));
        for other in [first(2, "a", 0), first(1, "b", 0), first(1, "a", 1)] {
            assert_ne!(base, other);
        }
    }
}
