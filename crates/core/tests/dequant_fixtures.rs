//! Dequantization equals the `gguf` Python package's, bit for bit, on every type.
//! Fixtures: fixtures/dequant (see fixtures/README.md for how they were made).

use plumb_core::{GgmlType, dequantize};
use std::path::PathBuf;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/dequant")
}

#[test]
fn every_type_is_bit_exact() {
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_dir().join("manifest.json")).unwrap()).unwrap();
    let mut checked = 0;
    for ty in GgmlType::DEQUANTIZABLE {
        let name = ty.to_string();
        let entry = &manifest[&name];
        assert!(entry.is_object(), "no fixture for {name}");
        let raw = std::fs::read(fixture_dir().join(format!("{name}.bin"))).unwrap();
        let want: Vec<u32> = std::fs::read(fixture_dir().join(format!("{name}.f32")))
            .unwrap()
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let info = ty.info().unwrap();
        assert_eq!(entry["block_bytes"].as_u64(), Some(info.block_bytes as u64), "{name} block size");
        assert_eq!(raw.len() / info.block_bytes * info.block_elems, want.len());
        let mut got = vec![0f32; want.len()];
        dequantize(ty, &raw, &mut got).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let (gb, wb) = (g.to_bits(), *w);
            // NaN payloads may differ only for NaN inputs of F16/BF16/F32 (none are generated).
            assert_eq!(gb, wb, "{name} element {i}: got {g:e}, want {:e}", f32::from_bits(wb));
        }
        checked += 1;
    }
    assert_eq!(checked, 13);
}

#[test]
fn size_errors_are_clear() {
    let mut out = vec![0f32; 32];
    let err = dequantize(GgmlType::Q4_0, &[0u8; 17], &mut out).unwrap_err();
    assert_eq!(err.to_string(), "Q4_0: 32 elements need 18 bytes, got 17");
    let err = dequantize(GgmlType::IQ2_XXS, &[0u8; 66], &mut vec![0f32; 256]).unwrap_err();
    assert_eq!(err.to_string(), "plumb cannot dequantize tensors of type IQ2_XXS");
}
