//! Property test: the reader, given mutated valid files, returns Ok or a clear error — never
//! panics, hangs or over-allocates. Any file it accepts must satisfy the reader's invariant.

#[path = "support/files.rs"]
mod files;

use plumb_checkpoint::GgufFile;
use proptest::prelude::*;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One mutation of a file's bytes.
#[derive(Clone, Debug)]
enum Mutation {
    /// Set byte at (position fraction) to value.
    Set(f64, u8),
    /// Overwrite 8 bytes with a little-endian u64 (lengths, counts, offsets).
    SetU64(f64, u64),
    Truncate(f64),
    Insert(f64, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let big = prop_oneof![Just(0u64), Just(1), Just(u64::MAX), Just(1 << 32), any::<u64>(), 0..100_000u64];
    prop_oneof![
        (0.0..1.0f64, any::<u8>()).prop_map(|(p, v)| Mutation::Set(p, v)),
        (0.0..0.3f64, big).prop_map(|(p, v)| Mutation::SetU64(p, v)),
        (0.0..1.0f64).prop_map(Mutation::Truncate),
        (0.0..1.0f64, prop::collection::vec(any::<u8>(), 1..16)).prop_map(|(p, v)| Mutation::Insert(p, v)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let at = |p: f64, len: usize| ((p * len as f64) as usize).min(len.saturating_sub(1));
    match m {
        // An earlier truncation may have left too few bytes to overwrite: then the mutation is a no-op.
        Mutation::Set(_, _) if bytes.is_empty() => {}
        Mutation::SetU64(_, _) if bytes.len() < 8 => {}
        Mutation::Set(p, v) => {
            let i = at(*p, bytes.len());
            bytes[i] = *v;
        }
        Mutation::SetU64(p, v) => {
            let i = at(*p, bytes.len() - 7);
            bytes[i..i + 8].copy_from_slice(&v.to_le_bytes());
        }
        Mutation::Truncate(p) => bytes.truncate(at(*p, bytes.len())),
        Mutation::Insert(p, v) => {
            let i = at(*p, bytes.len());
            bytes.splice(i..i, v.iter().copied());
        }
    }
}

static CASES: AtomicUsize = AtomicUsize::new(0);

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_files_never_panic(muts in prop::collection::vec(mutation(), 1..4)) {
        let mut bytes = files::tiny_model().to_bytes();
        for m in &muts {
            apply(&mut bytes, m);
        }
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&bytes).unwrap();
        f.flush().unwrap();
        if let Ok(file) = GgufFile::open(f.path()) {
            for t in &file.tensors {
                prop_assert_eq!(file.tensor_data(t).len() as u64, t.size);
            }
        }
        let n = CASES.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(1000) {
            eprintln!("gguf_fuzz: {n} mutated files read");
        }
    }
}
