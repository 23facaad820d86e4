//! The safetensors reader: valid files and sharded folders read back exactly; every kind of bad
//! header is a clear error naming the problem; mutated files never panic (property test), and any
//! file it accepts keeps every tensor inside its data section.

use plumb_checkpoint::{CheckpointError, SafetensorsFile, SafetensorsModel, StDtype};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::Path;

/// A safetensors file: `tensors` as (name, dtype, shape, bytes), laid out in order.
fn build(tensors: &[(&str, &str, Vec<usize>, Vec<u8>)], metadata: Option<Value>) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    if let Some(m) = metadata {
        header.insert("__metadata__".into(), m);
    }
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert((*name).into(), json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}));
    }
    with_header(&Value::Object(header).to_string(), &data)
}

fn with_header(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend_from_slice(data);
    out
}

fn sample() -> Vec<u8> {
    let w: Vec<u8> = (0..24u8).collect();
    let b: Vec<u8> = half::bf16::from_f32(1.5).to_le_bytes().repeat(3);
    build(&[("w", "F32", vec![2, 3], w), ("b", "BF16", vec![3], b)], Some(json!({"format": "pt"})))
}

fn open_bytes(bytes: &[u8]) -> Result<SafetensorsFile, CheckpointError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    std::fs::write(&path, bytes).unwrap();
    SafetensorsFile::open(&path)
}

#[test]
fn reads_tensors_and_metadata() {
    let f = open_bytes(&sample()).unwrap();
    let w = f.tensor("w").unwrap();
    assert_eq!((w.dtype, w.shape.clone()), (StDtype::F32, vec![2, 3]));
    assert_eq!(f.tensor_data(w), (0..24u8).collect::<Vec<_>>().as_slice());
    let b = f.tensor("b").unwrap();
    assert_eq!(&*f.tensor_host_bytes(b), half::bf16::from_f32(1.5).to_le_bytes().repeat(3).as_slice());
    assert_eq!(f.metadata(), [("format".to_string(), "pt".to_string())]);
    assert_eq!(StDtype::BF16.ggml(), Some(plumb_core::GgmlType::BF16));
}

fn why(bytes: &[u8]) -> String {
    match open_bytes(bytes) {
        Err(CheckpointError::BadSafetensors { why, .. }) => why,
        other => panic!("expected a BadSafetensors error, got {other:?}"),
    }
}

#[test]
fn bad_headers_are_named() {
    let t = |name: &str, dtype: &str, shape: Value, offsets: Value| {
        json!({name: {"dtype": dtype, "shape": shape, "data_offsets": offsets}}).to_string()
    };
    assert!(why(&[1, 2, 3]).contains("8-byte header length"));
    assert!(why(&u64::MAX.to_le_bytes()).contains("header length"));
    assert!(why(&with_header("[1, 2]", &[])).contains("not a JSON object"));
    assert!(why(&with_header(r#"{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}"#, &[0; 4])).contains("appears twice"));
    assert!(why(&with_header(&t("x", "Q4", json!([1]), json!([0, 1])), &[0])).contains("unknown dtype `Q4`"));
    assert!(why(&with_header(&t("x", "F32", json!([2]), json!([0, 4])), &[0; 4])).contains("needs 8"));
    assert!(why(&with_header(&t("x", "F32", json!([2]), json!([0, 8])), &[0; 4])).contains("outside"));
    assert!(why(&with_header(&t("x", "F32", json!([1]), json!([4, 0])), &[0; 4])).contains("outside"));
    assert!(why(&with_header(&t("x", "F32", json!([1, -1]), json!([0, 4])), &[0; 4])).contains("shape"));
    assert!(why(&with_header(&t("x", "F32", json!([u64::MAX, 4]), json!([0, 4])), &[0; 4])).contains("overflows"));
    assert!(why(&with_header(&t("x", "F32", json!([1]), json!([0, 4])), &[0; 8])).contains("belong to no tensor"));
    let overlap = json!({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
    });
    assert!(why(&with_header(&overlap.to_string(), &[0; 8])).contains("overlaps"));
    assert!(why(&with_header(r#"{"__metadata__": {"k": 1}}"#, &[])).contains("not a string"));
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
}

#[test]
fn sharded_folders_follow_their_index() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = build(&[("a", "F32", vec![1], vec![0; 4])], None);
    let b = build(&[("b", "F16", vec![2], vec![0; 4])], None);
    write(d, "model-00001-of-00002.safetensors", &a);
    write(d, "model-00002-of-00002.safetensors", &b);
    let index = json!({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}});
    write(d, "model.safetensors.index.json", index.to_string().as_bytes());
    let m = SafetensorsModel::open(d).unwrap();
    assert_eq!(m.names(), ["a", "b"]);
    assert_eq!(m.tensor("b").unwrap().1.dtype, StDtype::F16);
    // A missing shard, a tensor the index places wrongly, one it forgets, a path out of the folder.
    let err = |index: Value| {
        write(d, "model.safetensors.index.json", index.to_string().as_bytes());
        SafetensorsModel::open(d).unwrap_err().to_string()
    };
    assert!(
        err(json!({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "gone.safetensors"}}))
            .contains("`gone.safetensors` (for `b`) is missing")
    );
    assert!(
        err(json!({"weight_map": {"a": "model-00002-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
            .contains("does not hold it")
    );
    let both = build(&[("x", "F32", vec![1], vec![0; 4]), ("y", "F32", vec![1], vec![0; 4])], None);
    write(d, "both.safetensors", &both);
    assert!(err(json!({"weight_map": {"x": "both.safetensors"}})).contains("`y` is not in the index's weight_map"));
    assert!(err(json!({"weight_map": {"a": "../x.safetensors"}})).contains("outside the folder"));
    assert!(err(json!({"nope": 1})).contains("weight_map"));
    let empty = tempfile::tempdir().unwrap();
    assert!(SafetensorsModel::open(empty.path()).unwrap_err().to_string().contains("neither model.safetensors"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_files_never_panic(muts in prop::collection::vec((0.0..1.0f64, any::<u8>(), 0u8..3), 1..6)) {
        let mut bytes = sample();
        for (p, v, kind) in muts {
            let i = ((p * bytes.len() as f64) as usize).min(bytes.len().saturating_sub(1));
            match kind {
                0 if !bytes.is_empty() => bytes[i] = v,
                1 => bytes.truncate(i),
                _ => bytes.insert(i, v),
            }
        }
        if let Ok(f) = open_bytes(&bytes) {
            for t in f.tensors() {
                let data = f.tensor_data(t);
                prop_assert_eq!(data.len() as u64, t.end - t.begin);
                prop_assert_eq!(t.shape.iter().product::<usize>() as u64 * t.dtype.size(), t.end - t.begin);
            }
        }
    }
}
