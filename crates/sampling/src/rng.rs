//! A counter-based random stream: the draw for (seed, position) is a pure hash, so a sequence
//! samples the same tokens whether it runs alone, batched, resumed or drafted.

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform draw in [0, 1) for this seed and position.
pub fn uniform(seed: u64, position: u64) -> f64 {
    let bits = splitmix64(splitmix64(seed) ^ position.wrapping_mul(0xD134_2543_DE82_EF95));
    (bits >> 11) as f64 / (1u64 << 53) as f64
}
