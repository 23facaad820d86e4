//! `plumb synth`'s writer: every preset plans with the parameter count of the model it copies;
//! the tiny presets write folders the strict reader opens, with exactly the planned tensors;
//! the bytes depend on the seed alone (not the thread count or the sharding); weights have the
//! planned spread; bad configs and folders are refused with a clear error.

use plumb_checkpoint::synth::arch::Init;
use plumb_checkpoint::synth::{SynthDtype, SynthOptions, SynthPlan, presets};
use plumb_checkpoint::{HfCheckpoint, StDtype, source::NoProgress};
use std::path::Path;

fn write(plan: &SynthPlan, dir: &Path) {
    plan.write(dir, &NoProgress).unwrap();
}

fn options(dtype: SynthDtype, seed: u64) -> SynthOptions {
    SynthOptions { dtype, seed, ..SynthOptions::default() }
}

/// Every file of a folder, by name.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn presets_have_the_parameter_counts_of_their_models() {
    let billions = |name: &str| SynthPlan::preset(name, SynthOptions::default()).unwrap().num_params() as f64 / 1e9;
    for (name, want) in [
        ("llama-3.1-8b", 8.03),
        ("llama-3.2-1b", 1.24),
        ("qwen3-8b", 8.19),
        ("qwen3-0.6b", 0.596),
        ("qwen3-30b-a3b", 30.53),
        ("qwen3-moe-1.6b", 1.65),
    ] {
        let got = billions(name);
        assert!((got - want).abs() < 0.01 * want, "{name}: {got:.3} B parameters, expected {want} B");
    }
    for p in presets::PRESETS {
        SynthPlan::preset(p.name, SynthOptions::default()).unwrap_or_else(|e| panic!("{}: {e}", p.name));
    }
}

#[test]
fn qwen3_30b_a3b_has_the_hugging_face_expert_tensors() {
    let plan = SynthPlan::preset("qwen3-30b-a3b", SynthOptions::default()).unwrap();
    let shape = |name: &str| plan.tensors.iter().find(|t| t.name == name).map(|t| t.shape.clone());
    assert_eq!(shape("model.layers.47.mlp.gate.weight"), Some(vec![128, 2048]));
    assert_eq!(shape("model.layers.0.mlp.experts.127.gate_proj.weight"), Some(vec![768, 2048]));
    assert_eq!(shape("model.layers.0.mlp.experts.0.down_proj.weight"), Some(vec![2048, 768]));
    assert_eq!(shape("model.layers.0.self_attn.q_norm.weight"), Some(vec![128]));
    assert_eq!(shape("model.layers.0.mlp.gate_proj.weight"), None, "no dense MLP in sparse layers");
    assert_eq!(plan.tensors.iter().filter(|t| t.name.contains(".experts.")).count(), 48 * 128 * 3);
    // 61 GB of bf16 in 4 GiB shards.
    assert_eq!(plan.shards.len(), 15);
    assert!(plan.shards.iter().all(|s| s.bytes <= 4 << 30));
}

#[test]
fn the_hybrid_presets_have_the_hugging_face_tensors() {
    let plan = SynthPlan::preset("qwen3.5-moe-1.7b", SynthOptions::default()).unwrap();
    let shape = |plan: &SynthPlan, name: &str| plan.tensors.iter().find(|t| t.name == name).map(|t| t.shape.clone());
    assert_eq!(shape(&plan, "model.layers.0.linear_attn.in_proj_qkv.weight"), Some(vec![8192, 2048]));
    assert_eq!(shape(&plan, "model.layers.0.linear_attn.conv1d.weight"), Some(vec![8192, 1, 4]));
    assert_eq!(shape(&plan, "model.layers.3.self_attn.q_proj.weight"), Some(vec![8192, 2048]));
    assert_eq!(shape(&plan, "model.layers.3.linear_attn.in_proj_qkv.weight"), None, "layer 3 is full attention");
    assert_eq!(shape(&plan, "model.layers.7.mlp.experts.15.down_proj.weight"), Some(vec![2048, 512]));
    assert_eq!(shape(&plan, "model.layers.7.mlp.shared_expert_gate.weight"), Some(vec![1, 2048]));
    assert_eq!(plan.num_params(), 1_702_088_832);
    let next =
        SynthPlan::preset("qwen3-next-1.3b", SynthOptions { num_layers: Some(4), ..Default::default() }).unwrap();
    assert_eq!(shape(&next, "model.layers.2.linear_attn.in_proj_qkvz.weight"), Some(vec![12288, 2048]));
    assert_eq!(shape(&next, "model.layers.2.linear_attn.in_proj_ba.weight"), Some(vec![64, 2048]));
    assert_eq!(next.shape.config.rope_dim, 64);
    assert!(next.tensors.iter().all(|t| !t.name.contains("layers.4.")), "--layers 4 keeps four layers");
    // Dense Qwen3.5: a SwiGLU after every mixer, a tied head, 16 value heads.
    let dense = SynthPlan::preset("qwen3.5-0.8b", SynthOptions::default()).unwrap();
    assert_eq!(shape(&dense, "model.layers.0.linear_attn.in_proj_qkv.weight"), Some(vec![6144, 1024]));
    assert_eq!(shape(&dense, "model.layers.23.self_attn.q_proj.weight"), Some(vec![4096, 1024]));
    assert_eq!(shape(&dense, "model.layers.23.mlp.down_proj.weight"), Some(vec![1024, 3584]));
    assert_eq!(shape(&dense, "lm_head.weight"), None, "tied head");
    assert!(dense.tensors.iter().all(|t| !t.name.contains("expert")));
    assert_eq!(dense.tensors.iter().filter(|t| t.name.ends_with("linear_attn.A_log")).count(), 18);
}

#[test]
fn the_deepseek_v4_presets_hold_the_tensors_transformers_writes() {
    // The tiny preset has fixtures/deepseek_v4's config; its folder (written by transformers)
    // is the truth for names, shapes and dtypes: float32 parameters, int64 tid2eid, the rest as
    // --dtype (bf16 there).
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/deepseek_v4/hf/model.safetensors");
    let bytes = std::fs::read(fixture).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut want: Vec<(String, Vec<u64>, String)> = header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| {
            let shape = v["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
            (k.clone(), shape, v["dtype"].as_str().unwrap().to_string())
        })
        .collect();
    want.sort();
    let dir = tempfile::tempdir().unwrap();
    let plan = SynthPlan::preset("tiny-deepseek-v4", options(SynthDtype::BF16, 3)).unwrap();
    write(&plan, dir.path());
    let ckpt = HfCheckpoint::open(dir.path()).unwrap();
    let mut got: Vec<(String, Vec<u64>, String)> = ckpt
        .weights
        .names()
        .into_iter()
        .map(|name| {
            let (_, t) = ckpt.weights.tensor(name).unwrap();
            (name.to_string(), t.shape.iter().map(|&d| d as u64).collect(), format!("{:?}", t.dtype))
        })
        .collect();
    got.sort();
    assert_eq!(got, want);
    // The hash router's table names distinct experts per token, all in range.
    let (file, t) = ckpt.weights.tensor("model.layers.0.ffn.gate.tid2eid").unwrap();
    let ids: Vec<i64> =
        file.tensor_data(t).chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect();
    for row in ids.chunks_exact(2) {
        assert!(row[0] != row[1] && row.iter().all(|&e| (0..8).contains(&e)), "{row:?}");
    }
    // DeepSeek-V4-Flash's backbone (its MTP layer is not part of it).
    let flash = SynthPlan::preset("deepseek-v4-flash", SynthOptions::default()).unwrap();
    let shape = |name: &str| flash.tensors.iter().find(|t| t.name == name).map(|t| t.shape.clone());
    assert_eq!(shape("model.layers.0.attn.wq_b.weight"), Some(vec![64 * 512, 1024]));
    assert_eq!(shape("model.layers.0.attn.wo_a.weight"), Some(vec![8 * 1024, 64 * 512 / 8]));
    assert_eq!(shape("model.layers.0.ffn.gate.tid2eid"), Some(vec![129_280, 6]));
    assert_eq!(shape("model.layers.3.attn.indexer.wq_b.weight"), Some(vec![64 * 128, 1024]), "layer 3 is CSA");
    assert_eq!(shape("model.layers.2.attn.compressor.ape"), Some(vec![128, 512]), "layer 2 is HCA");
    assert_eq!(shape("model.layers.42.ffn.experts.255.w2.weight"), Some(vec![4096, 2048]));
    assert_eq!(flash.num_params(), 284_328_206_295);
    let small = SynthPlan::preset("deepseek-v4-1.6b", SynthOptions::default()).unwrap();
    let b = small.num_params() as f64 / 1e9;
    assert!((1.0..2.0).contains(&b), "deepseek-v4-1.6b: {b} B parameters");
    eprintln!("deepseek-v4-flash: {} parameters; deepseek-v4-1.6b: {b:.3} B", flash.num_params());
}

#[test]
fn tiny_presets_write_folders_the_reader_opens() {
    for (name, dtype, st) in [
        ("tiny-llama", SynthDtype::F32, StDtype::F32),
        ("tiny-qwen3", SynthDtype::BF16, StDtype::BF16),
        ("tiny-qwen3-moe", SynthDtype::F16, StDtype::F16),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let plan = SynthPlan::preset(name, options(dtype, 1)).unwrap();
        write(&plan, dir.path());
        let ckpt = HfCheckpoint::open(dir.path()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(ckpt.config, plan.shape.config, "{name}: config.json reads back as planned");
        let mut want: Vec<&str> = plan.tensors.iter().map(|t| t.name.as_str()).collect();
        want.sort_unstable();
        assert_eq!(ckpt.weights.names(), want, "{name}");
        for t in &plan.tensors {
            let (_, info) = ckpt.weights.tensor(&t.name).unwrap();
            assert_eq!((&info.shape, info.dtype), (&t.shape, st), "{name}: {}", t.name);
        }
        let names = files(dir.path()).into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(
            names,
            ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"],
            "{name}"
        );
    }
}

#[test]
fn the_moe_preset_has_dense_and_sparse_layers() {
    let plan = SynthPlan::preset("tiny-qwen3-moe", SynthOptions::default()).unwrap();
    let has = |name: &str| plan.tensors.iter().any(|t| t.name == name);
    assert!(has("model.layers.0.mlp.gate.weight") && has("model.layers.2.mlp.experts.7.up_proj.weight"));
    assert!(has("model.layers.1.mlp.gate_proj.weight"), "mlp_only_layers [1] is dense");
    assert!(!has("model.layers.1.mlp.gate.weight"));
}

#[test]
fn bytes_depend_on_the_seed_only() {
    let plan = |seed, threads| {
        let o = SynthOptions { threads, ..options(SynthDtype::BF16, seed) };
        SynthPlan::preset("tiny-qwen3", o).unwrap()
    };
    let folder = |p: &SynthPlan| {
        let dir = tempfile::tempdir().unwrap();
        write(p, dir.path());
        files(dir.path())
    };
    let (a, b, c) = (folder(&plan(5, 1)), folder(&plan(5, 3)), folder(&plan(6, 2)));
    assert_eq!(a, b, "same seed, other thread count: same bytes");
    for ((name, x), (_, y)) in a.iter().zip(&c) {
        match name.as_str() {
            "model.safetensors" => assert_ne!(x, y, "another seed gives other weights"),
            _ => assert_eq!(x, y, "{name} does not depend on the seed"),
        }
    }
}

#[test]
fn shards_hold_the_same_tensors_as_one_file() {
    let (one, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(&SynthPlan::preset("tiny-llama", options(SynthDtype::F32, 3)).unwrap(), one.path());
    let sharded =
        SynthPlan::preset("tiny-llama", SynthOptions { max_shard_bytes: 100_000, ..options(SynthDtype::F32, 3) })
            .unwrap();
    assert!(sharded.shards.len() > 2, "{} shards", sharded.shards.len());
    write(&sharded, many.path());
    let n = sharded.shards.len();
    assert!(many.path().join(format!("model-00001-of-{n:05}.safetensors")).exists());
    assert!(!many.path().join("model.safetensors").exists());
    let (a, b) = (HfCheckpoint::open(one.path()).unwrap(), HfCheckpoint::open(many.path()).unwrap());
    assert_eq!(a.weights.names(), b.weights.names());
    for name in a.weights.names() {
        let (fa, ta) = a.weights.tensor(name).unwrap();
        let (fb, tb) = b.weights.tensor(name).unwrap();
        assert_eq!(fa.tensor_data(ta), fb.tensor_data(tb), "{name}");
    }
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(many.path().join("model.safetensors.index.json")).unwrap())
            .unwrap();
    let total: u64 = sharded.shards.iter().map(|s| s.bytes).sum();
    assert_eq!(index["metadata"]["total_size"], total);
}

#[test]
fn weights_have_the_planned_spread() {
    let dir = tempfile::tempdir().unwrap();
    let plan = SynthPlan::preset("tiny-qwen3", options(SynthDtype::F32, 9)).unwrap();
    write(&plan, dir.path());
    let ckpt = HfCheckpoint::open(dir.path()).unwrap();
    for t in &plan.tensors {
        let (file, info) = ckpt.weights.tensor(&t.name).unwrap();
        let xs: Vec<f64> =
            file.tensor_data(info).chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64).collect();
        match t.init {
            Init::Ones => assert!(xs.iter().all(|&x| x == 1.0), "{}", t.name),
            Init::Zeros => assert!(xs.iter().all(|&x| x == 0.0), "{}", t.name),
            Init::Random { std } => {
                let n = xs.len() as f64;
                let mean = xs.iter().sum::<f64>() / n;
                let got = (xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n).sqrt();
                // Sampling error of a standard deviation over n values: about std/√(2n).
                let tol = 6.0 * std / (2.0 * n).sqrt();
                assert!((got - std).abs() < tol && mean.abs() < 6.0 * std / n.sqrt(), "{}: {got} vs {std}", t.name);
            }
            Init::ExpertIds { .. } => panic!("{}: Qwen3 has no hash router", t.name),
        }
    }
}

#[test]
fn layers_override_keeps_the_shape() {
    let o = SynthOptions { num_layers: Some(2), ..SynthOptions::default() };
    let plan = SynthPlan::preset("qwen3-30b-a3b", o).unwrap();
    assert_eq!(plan.shape.config.num_hidden_layers, 2);
    assert_eq!(plan.shape.config.hidden_size, 2048);
    assert!(plan.tensors.iter().all(|t| !t.name.starts_with("model.layers.2.")));
    assert_eq!(plan.config["num_hidden_layers"], 2);
    let moe = SynthPlan::preset("tiny-qwen3-moe", SynthOptions { num_layers: Some(1), ..SynthOptions::default() });
    assert_eq!(moe.unwrap().config["mlp_only_layers"], serde_json::json!([]), "layer 1 no longer exists");
}

#[test]
fn bad_configs_are_refused_with_the_key_at_fault() {
    let tiny = |name: &str| (presets::preset(name).unwrap().config)();
    type Edit = fn(&mut serde_json::Value);
    let cases: [(&str, Edit, &str); 9] = [
        ("tiny-qwen3", |c| c["architectures"] = serde_json::json!(["GPT2LMHeadModel"]), "plumb synth writes"),
        ("tiny-qwen3", |c| c["model_type"] = "llama".into(), "contradicts architecture"),
        ("tiny-qwen3", |c| c["num_key_value_heads"] = 3.into(), "cannot be grouped"),
        ("tiny-qwen3", |c| c["vocab_size"] = 200.into(), "`vocab_size` is 200; a byte-level tokenizer needs"),
        ("tiny-llama", |c| c["hidden_size"] = serde_json::Value::Null, "`hidden_size` is missing"),
        ("tiny-qwen3-moe", |c| c["num_experts_per_tok"] = 9.into(), "more than the 8 experts"),
        ("tiny-qwen3-moe", |c| c["mlp_only_layers"] = serde_json::json!([5]), "names layer 5"),
        ("tiny-qwen3-moe", |c| c["decoder_sparse_step"] = 0.into(), "`decoder_sparse_step` must be positive"),
        ("tiny-qwen3-moe", |c| drop(c.as_object_mut().unwrap().remove("num_experts")), "`num_experts` is missing"),
    ];
    for (preset, edit, want) in cases {
        let mut c = tiny(preset);
        edit(&mut c);
        let err = SynthPlan::new(&c.to_string(), "my/config.json", SynthOptions::default()).unwrap_err().to_string();
        assert!(err.contains(want) && err.starts_with("my/config.json"), "{err:?} should contain {want:?}");
    }
    let err = SynthPlan::new("[1, 2]", "c.json", SynthOptions::default()).unwrap_err().to_string();
    assert!(err.contains("not a JSON object"), "{err}");
    let err = SynthPlan::preset("gpt-5", SynthOptions::default()).unwrap_err().to_string();
    assert!(err.contains("unknown preset `gpt-5`") && err.contains("tiny-llama"), "{err}");
}

#[test]
fn a_folder_that_is_not_empty_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
    let plan = SynthPlan::preset("tiny-llama", SynthOptions::default()).unwrap();
    let err = plan.write(dir.path(), &NoProgress).unwrap_err().to_string();
    assert!(err.contains("is not empty"), "{err}");
    assert_eq!(std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(), "mine");
}
