//! Element types of checkpoint tensors, as GGML numbers them, with their block geometry.
//! Invariant: `block_bytes` and `block_elems` match ggml's `ggml_type_traits` for every type listed.

use std::fmt;

/// A tensor element type by its GGML type id. Types plumb can dequantize have exact geometry;
/// the rest are known by name only, so an error can say what a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
}

/// Geometry of one type: a block of `block_elems` elements takes `block_bytes` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeInfo {
    pub block_elems: usize,
    pub block_bytes: usize,
}

/// Elements in one K-quant super-block.
pub const QK_K: usize = 256;

impl GgmlType {
    /// The type with GGML id `id`, or `None` for an id GGML never assigned.
    pub fn from_id(id: u32) -> Option<Self> {
        use GgmlType::*;
        Some(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2_K,
            11 => Q3_K,
            12 => Q4_K,
            13 => Q5_K,
            14 => Q6_K,
            15 => Q8_K,
            16 => IQ2_XXS,
            17 => IQ2_XS,
            18 => IQ3_XXS,
            19 => IQ1_S,
            20 => IQ4_NL,
            21 => IQ3_S,
            22 => IQ2_S,
            23 => IQ4_XS,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            29 => IQ1_M,
            30 => BF16,
            34 => TQ1_0,
            35 => TQ2_0,
            39 => MXFP4,
            _ => return None,
        })
    }

    /// The GGML id of this type.
    pub fn id(self) -> u32 {
        use GgmlType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q8_1 => 9,
            Q2_K => 10,
            Q3_K => 11,
            Q4_K => 12,
            Q5_K => 13,
            Q6_K => 14,
            Q8_K => 15,
            IQ2_XXS => 16,
            IQ2_XS => 17,
            IQ3_XXS => 18,
            IQ1_S => 19,
            IQ4_NL => 20,
            IQ3_S => 21,
            IQ2_S => 22,
            IQ4_XS => 23,
            I8 => 24,
            I16 => 25,
            I32 => 26,
            I64 => 27,
            F64 => 28,
            IQ1_M => 29,
            BF16 => 30,
            TQ1_0 => 34,
            TQ2_0 => 35,
            MXFP4 => 39,
        }
    }

    /// Block geometry, for every type whose layout plumb knows (all it can read or skip).
    pub fn info(self) -> Option<TypeInfo> {
        use GgmlType::*;
        let (block_elems, block_bytes) = match self {
            F32 => (1, 4),
            F16 | BF16 => (1, 2),
            F64 | I64 => (1, 8),
            I32 => (1, 4),
            I16 => (1, 2),
            I8 => (1, 1),
            Q4_0 => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 36),
            Q2_K => (QK_K, 84),
            Q3_K => (QK_K, 110),
            Q4_K => (QK_K, 144),
            Q5_K => (QK_K, 176),
            Q6_K => (QK_K, 210),
            Q8_K => (QK_K, 292),
            IQ4_NL => (32, 18),
            IQ4_XS => (QK_K, 136),
            _ => return None,
        };
        Some(TypeInfo { block_elems, block_bytes })
    }

    /// Whether plumb can dequantize this type exactly.
    pub fn can_dequantize(self) -> bool {
        use GgmlType::*;
        matches!(self, F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q2_K | Q3_K | Q4_K | Q5_K | Q6_K)
    }

    /// Bytes taken by `num_elems` elements, or `None` when the count is not a whole number of
    /// blocks, the geometry is unknown, or the size overflows.
    pub fn bytes_for(self, num_elems: u64) -> Option<u64> {
        let info = self.info()?;
        if !num_elems.is_multiple_of(info.block_elems as u64) {
            return None;
        }
        (num_elems / info.block_elems as u64).checked_mul(info.block_bytes as u64)
    }

    /// Every type plumb can dequantize, in GGML id order.
    pub const DEQUANTIZABLE: [GgmlType; 13] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::BF16,
    ];
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl std::str::FromStr for GgmlType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        (0..64)
            .filter_map(GgmlType::from_id)
            .find(|t| t.to_string().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown GGML type `{s}`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for id in 0..64 {
            if let Some(t) = GgmlType::from_id(id) {
                assert_eq!(t.id(), id);
                assert_eq!(t.to_string().parse::<GgmlType>(), Ok(t));
            }
        }
    }

    #[test]
    fn bytes_for_rejects_partial_blocks_and_overflow() {
        assert_eq!(GgmlType::Q4_0.bytes_for(64), Some(36));
        assert_eq!(GgmlType::Q4_0.bytes_for(33), None);
        assert_eq!(GgmlType::Q8_0.bytes_for(u64::MAX / 32 * 32), None);
        assert_eq!(GgmlType::IQ2_XXS.bytes_for(256), None);
    }
}
