//! DeepSeek V4 against transformers: the tiny random model of fixtures/deepseek_v4 (sliding, CSA
//! and HCA layers; hash-routed and learned MoE; windows of 8 / 4 / 8 tokens) on plumb's float64
//! graph at every position of both prompts, and the new ops one by one against the float64
//! inputs and outputs transformers recorded (`intermediates` in the manifest): the mHC mix, the
//! final HC head, the CSA and HCA compressors, the indexer's top-k (exact ids) and both routers.
//! The CPU backend's kernels for every V4 op run the whole model within the gate's bound of the
//! float64 logits. Also: a backend without the op groups is refused before any weight is read.

#[path = "support/faulty.rs"]
mod faulty;

use plumb_backend_cpu::CpuBackend;
use plumb_backend_ref::{RefBackend, RefTensor};
use plumb_checkpoint::HfCheckpoint;
use plumb_core::{
    Backend, CompressedAttentionOps, Compression, ForwardBatch, HcSpec, HyperConnectionOps, LinearInputs, LinearOps,
    ScoredMoeOps, WeightSource,
};
use plumb_models::families::deepseek_v4::yarn_inv_freq;
use plumb_verify::nrms;
use serde_json::Value;
use std::path::PathBuf;

type B = RefBackend<f64>;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/deepseek_v4")
}

fn manifest() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture().join("manifest.json")).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn f64s(file: &str) -> Vec<f64> {
    let bytes = std::fs::read(fixture().join(file)).unwrap();
    bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect()
}

fn f32s(file: &str) -> Vec<f64> {
    let bytes = std::fs::read(fixture().join(file)).unwrap();
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64).collect()
}

fn i64s(file: &str) -> Vec<i64> {
    let bytes = std::fs::read(fixture().join(file)).unwrap();
    bytes.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect()
}

#[test]
fn deepseek_v4_matches_transformers_float64() {
    let m = manifest();
    let vocab = m["vocab_size"].as_u64().unwrap() as usize;
    let b = B::new(2);
    let model = plumb_models::load_model_with(&HfCheckpoint::open(fixture().join("hf")).unwrap(), &b, None).unwrap();
    let (mut worst, mut floor_worst) = (0f64, 0f64);
    for (i, p) in m["prompts"].as_array().unwrap().iter().enumerate() {
        let mut tokens = ids(&p["prompt_ids"]);
        let n_prompt = tokens.len();
        tokens.extend(ids(&p["greedy_f64"]));
        let want = f64s(p["files"]["logits_f64"]["file"].as_str().unwrap());
        let floor = f32s(p["files"]["logits_f32"]["file"].as_str().unwrap());
        let blocks = tokens.len().div_ceil(16);
        let mut kv = b.new_kv_cache(&model.kv_spec(16, blocks));
        let batch = ForwardBatch::single_lane(&tokens, 0, 16, (0..blocks as u32).collect());
        let got = b.download_f64(&model.forward(&b, &batch, &mut kv, None));
        assert_eq!((got.len(), want.len()), (tokens.len() * vocab, tokens.len() * vocab));
        for pos in 0..tokens.len() {
            let row = pos * vocab..(pos + 1) * vocab;
            worst = worst.max(nrms(&got[row.clone()], &want[row.clone()]));
            floor_worst = floor_worst.max(nrms(&floor[row.clone()], &want[row.clone()]));
            if pos + 1 >= n_prompt && pos + 1 < tokens.len() {
                let best = (0..vocab).fold(0, |a, j| if got[row.start + j] > got[row.start + a] { j } else { a });
                assert_eq!(best as u32, tokens[pos + 1], "prompt {i}: float64 greedy differs at position {pos}");
            }
        }
    }
    eprintln!("deepseek_v4: float64 graph {worst:.3e} NRMS worst row; transformers' float32 {floor_worst:.3e}");
    assert!(worst < 1e-12, "float64 graph vs transformers: {worst:e}");
}

/// The fixture's checkpoint, read by name onto the float64 reference.
struct Weights {
    ckpt: HfCheckpoint,
    b: B,
}

impl Weights {
    fn new() -> Self {
        Weights { ckpt: HfCheckpoint::open(fixture().join("hf")).unwrap(), b: B::new(1) }
    }

    fn get(&self, name: &str) -> RefTensor<f64> {
        let v = plumb_checkpoint::CheckpointRef::from(&self.ckpt).weight(name).unwrap().unwrap();
        let src = WeightSource { name: name.into(), ty: v.ty, rows: v.rows, cols: v.cols, bytes: v.bytes };
        self.b.load_weight(src).unwrap()
    }

    fn linear(&self, x: &RefTensor<f64>, name: &str) -> RefTensor<f64> {
        let w = self.get(name);
        let mut out = self.b.tensor(x.rows, w.rows);
        self.b.linear(x, &w, &mut out);
        out
    }
}

fn tensor(rows: usize, cols: usize, data: Vec<f64>) -> RefTensor<f64> {
    assert_eq!(data.len(), rows * cols);
    RefTensor { rows, cols, data, linear_inputs: LinearInputs::F32 }
}

/// Trace tensor `kind` `j` (`input` / `output`) of module `name`, flattened.
fn traced(m: &Value, name: &str, kind: &str, j: usize) -> Vec<f64> {
    f64s(m["intermediates"][name][format!("{kind}s")][j]["file"].as_str().unwrap())
}

fn max_rel(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |a, x| a.max(x.abs())).max(1e-300);
    got.iter().zip(want).fold(0f64, |a, (g, w)| a.max((g - w).abs())) / scale
}

const HC: HcSpec = HcSpec { num_streams: 4, sinkhorn_iters: 20, hc_eps: 1e-6, norm_eps: 1e-6 };

#[test]
fn hyper_connections_match_transformers() {
    let (m, w) = (manifest(), Weights::new());
    let b = &w.b;
    let streams = traced(&m, "model.layers.1.attn_hc", "input", 0);
    let n = streams.len() / 256;
    let x = tensor(n, 256, streams);
    let (mut post, mut comb, mut collapsed) = (b.tensor(n, 4), b.tensor(n, 16), b.tensor(n, 64));
    let p = "model.layers.1.hc_attn";
    let (f, base, scale) = (w.get(&format!("{p}_fn")), w.get(&format!("{p}_base")), w.get(&format!("{p}_scale")));
    b.hc_pre(&x, &f, &base, &scale, HC, &mut post, &mut comb, &mut collapsed);
    for (j, got) in [&post.data, &comb.data, &collapsed.data].into_iter().enumerate() {
        let err = max_rel(got, &traced(&m, "model.layers.1.attn_hc", "output", j));
        assert!(err < 1e-13, "attn_hc output {j}: {err:e}");
    }
    let x = tensor(n, 256, traced(&m, "model.hc_head", "input", 0));
    let mut out = b.tensor(n, 64);
    let (f, base, scale) =
        (w.get("model.hc_head.hc_fn"), w.get("model.hc_head.hc_base"), w.get("model.hc_head.hc_scale"));
    b.hc_head(&x, &f, &base, &scale, HC, &mut out);
    let err = max_rel(&out.data, &traced(&m, "model.hc_head", "output", 0));
    assert!(err < 1e-13, "hc_head: {err:e}");
}

#[test]
fn compressors_and_the_indexer_match_transformers() {
    let (m, w) = (manifest(), Weights::new());
    let b = &w.b;
    let x = traced(&m, "model.layers.1.self_attn.compressor", "input", 0);
    let n = x.len() / 64;
    let x = tensor(n, 64, x);
    let inv = yarn_inv_freq(160000.0, 8, 4.0, 64.0, 32.0, 1.0);
    let entries = |p: &str, c: Compression, d: usize| {
        let (kv, gate) = (w.linear(&x, &format!("{p}.wkv.weight")), w.linear(&x, &format!("{p}.wgate.weight")));
        let num = c.num_entries(n / c.ratio * c.ratio);
        let rows: Vec<u32> = (0..(n / c.ratio * c.ratio) as u32).collect();
        let (mut kvw, mut gw) = (b.tensor(rows.len(), kv.cols), b.tensor(rows.len(), gate.cols));
        b.gather_rows(&kv, &rows, &mut kvw);
        b.gather_rows(&gate, &rows, &mut gw);
        let mut out = b.tensor(num, d);
        b.compress_kv(&kvw, &gw, &w.get(&format!("{p}.ape")), &w.get(&format!("{p}.norm.weight")), 1e-6, c, &mut out);
        let positions: Vec<u32> = (0..num).map(|e| (e * c.ratio) as u32).collect();
        b.rope_tail_interleaved(&mut out, &plumb_core::RopeOps::rope_table(b, &positions, &inv), 1, d, false);
        out
    };
    let csa = Compression { ratio: 4, overlap: true, prev_window: false };
    let got = entries("model.layers.1.attn.compressor", csa, 32);
    let err = max_rel(&got.data, &traced(&m, "model.layers.1.self_attn.compressor", "output", 0));
    assert!(err < 1e-13, "CSA entries: {err:e}");
    // Layer 2 (HCA): disjoint windows of 8, from its own input.
    let hca = Compression { ratio: 8, overlap: false, prev_window: false };
    let x = tensor(n, 64, traced(&m, "model.layers.2.self_attn.compressor", "input", 0));
    let (kv, gate) = (
        w.linear(&x, "model.layers.2.attn.compressor.wkv.weight"),
        w.linear(&x, "model.layers.2.attn.compressor.wgate.weight"),
    );
    let mut hca_out = b.tensor(n / 8, 32);
    let (ape, norm) =
        (w.get("model.layers.2.attn.compressor.ape"), w.get("model.layers.2.attn.compressor.norm.weight"));
    b.compress_kv(&kv, &gate, &ape, &norm, 1e-6, hca, &mut hca_out);
    let positions: Vec<u32> = (0..n / 8).map(|e| (e * 8) as u32).collect();
    b.rope_tail_interleaved(&mut hca_out, &plumb_core::RopeOps::rope_table(b, &positions, &inv), 1, 32, false);
    let err = max_rel(&hca_out.data, &traced(&m, "model.layers.2.self_attn.compressor", "output", 0));
    assert!(err < 1e-13, "HCA entries: {err:e}");
    // The indexer of layer 1: its own compressor at 16 dims, queries from q_residual, RoPE'd.
    let x = tensor(n, 64, traced(&m, "model.layers.1.self_attn.compressor.indexer", "input", 0));
    let q_res = tensor(n, 32, traced(&m, "model.layers.1.self_attn.compressor.indexer", "input", 1));
    let p = "model.layers.1.attn.indexer";
    let (kv, gate) =
        (w.linear(&x, &format!("{p}.compressor.wkv.weight")), w.linear(&x, &format!("{p}.compressor.wgate.weight")));
    let mut keys = b.tensor(n / 4, 16);
    let (ape, norm) = (w.get(&format!("{p}.compressor.ape")), w.get(&format!("{p}.compressor.norm.weight")));
    b.compress_kv(&kv, &gate, &ape, &norm, 1e-6, csa, &mut keys);
    let positions: Vec<u32> = (0..n / 4).map(|e| (e * 4) as u32).collect();
    b.rope_tail_interleaved(&mut keys, &plumb_core::RopeOps::rope_table(b, &positions, &inv), 1, 16, false);
    let mut q = w.linear(&q_res, &format!("{p}.wq_b.weight"));
    let rows: Vec<u32> = (0..n as u32).collect();
    b.rope_tail_interleaved(&mut q, &plumb_core::RopeOps::rope_table(b, &rows, &inv), 2, 16, false);
    let weights = w.linear(&x, &format!("{p}.weights_proj.weight"));
    let visible: Vec<u32> = rows.iter().map(|&t| (t + 1) / 4).collect();
    let got = b.indexer_topk(&q, &keys, &weights, &visible, 2, 0.25, 0.5f64.sqrt());
    let want =
        i64s(m["intermediates"]["model.layers.1.self_attn.compressor.indexer"]["outputs"][0]["file"].as_str().unwrap());
    assert_eq!(got.iter().map(|&v| v as i64).collect::<Vec<_>>(), want, "indexer top-k ids");
}

#[test]
fn routers_match_transformers() {
    let (m, w) = (manifest(), Weights::new());
    let b = &w.b;
    // Learned (layer 1): ids in descending biased score, weights renormalised × 1.5.
    let x = traced(&m, "model.layers.1.mlp.gate", "input", 0);
    let n = x.len() / 64;
    let logits = w.linear(&tensor(n, 64, x), "model.layers.1.ffn.gate.weight");
    assert!(max_rel(&logits.data, &traced(&m, "model.layers.1.mlp.gate", "output", 0)) < 1e-14);
    let mut weights = b.tensor(n, 2);
    let chosen = b.sqrt_softplus_topk(&logits, &w.get("model.layers.1.ffn.gate.bias"), 2, 1.5, &mut weights);
    let want = i64s(m["intermediates"]["model.layers.1.mlp.gate"]["outputs"][2]["file"].as_str().unwrap());
    assert_eq!(chosen.iter().map(|&v| v as i64).collect::<Vec<_>>(), want, "learned router ids");
    assert!(max_rel(&weights.data, &traced(&m, "model.layers.1.mlp.gate", "output", 1)) < 1e-14);
    // Hash (layer 0): ids from tid2eid of the token ids, weights from the scores.
    let x = traced(&m, "model.layers.0.mlp.gate", "input", 0);
    let tokens = i64s(m["intermediates"]["model.layers.0.mlp.gate"]["inputs"][1]["file"].as_str().unwrap());
    let logits = w.linear(&tensor(n, 64, x), "model.layers.0.ffn.gate.weight");
    let want_ids = i64s(m["intermediates"]["model.layers.0.mlp.gate"]["outputs"][2]["file"].as_str().unwrap());
    let table =
        plumb_checkpoint::CheckpointRef::from(&w.ckpt).weight("model.layers.0.ffn.gate.tid2eid").unwrap().unwrap();
    let table: Vec<i64> = table.data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
    let hashed: Vec<u32> =
        tokens.iter().flat_map(|&t| [table[t as usize * 2] as u32, table[t as usize * 2 + 1] as u32]).collect();
    assert_eq!(hashed.iter().map(|&v| v as i64).collect::<Vec<_>>(), want_ids, "hash router ids");
    let mut weights = b.tensor(n, 2);
    b.hash_route_weights(&logits, &hashed, 1.5, &mut weights);
    assert!(max_rel(&weights.data, &traced(&m, "model.layers.0.mlp.gate", "output", 1)) < 1e-14);
    // The shared expert of layer 0: clamped SwiGLU (limit 3) between w1/w3 and w2.
    let x = tensor(n, 64, traced(&m, "model.layers.0.mlp.shared_experts", "input", 0));
    let (g, u) = (
        w.linear(&x, "model.layers.0.ffn.shared_experts.w1.weight"),
        w.linear(&x, "model.layers.0.ffn.shared_experts.w3.weight"),
    );
    assert!(g.data.iter().chain(&u.data).any(|v| v.abs() > 3.0), "the clamp must bite in this fixture");
    let mut act = b.tensor(n, 32);
    b.clamped_swiglu(&g, &u, 3.0, &mut act);
    let y = w.linear(&act, "model.layers.0.ffn.shared_experts.w2.weight");
    assert!(max_rel(&y.data, &traced(&m, "model.layers.0.mlp.shared_experts", "output", 0)) < 1e-13);
}

#[test]
fn a_backend_without_the_op_groups_is_refused_before_loading() {
    // A CPU backend that offers none of the optional groups (the conformance suite's fault
    // injector, here without a fault).
    let plain = faulty::Faulty { inner: CpuBackend::new(1), fault: faulty::Fault::None };
    let err = plumb_models::load_model_with(&HfCheckpoint::open(fixture().join("hf")).unwrap(), &plain, None)
        .err()
        .expect("a backend without compressed-attention kernels is refused");
    assert!(err.to_string().contains("compressed sparse attention"), "{err}");
}
#[test]
fn the_cpu_backend_matches_transformers_within_the_gates_bound() {
    // The CPU backend's float32 kernels for every V4 op, whole prompts: each position's logits
    // within 4× the NRMS of transformers' own float32 run (the gate's bound), and its greedy
    // choice the float64 one wherever the float64 top-2 gap is not a near-tie.
    let m = manifest();
    let vocab = m["vocab_size"].as_u64().unwrap() as usize;
    let b = CpuBackend::new(2);
    let model = plumb_models::load_model_with(&HfCheckpoint::open(fixture().join("hf")).unwrap(), &b, None).unwrap();
    let (mut worst, mut floor_worst) = (0f64, 0f64);
    for p in m["prompts"].as_array().unwrap() {
        let mut tokens = ids(&p["prompt_ids"]);
        tokens.extend(ids(&p["greedy_f64"]));
        let want = f64s(p["files"]["logits_f64"]["file"].as_str().unwrap());
        let floor = f32s(p["files"]["logits_f32"]["file"].as_str().unwrap());
        let blocks = tokens.len().div_ceil(16);
        let mut kv = b.new_kv_cache(&model.kv_spec(16, blocks));
        let batch = ForwardBatch::single_lane(&tokens, 0, 16, (0..blocks as u32).collect());
        let got = b.download_f64(&model.forward(&b, &batch, &mut kv, None));
        assert!(got.iter().all(|v| v.is_finite()), "a CPU logit is not finite");
        for pos in 0..tokens.len() {
            let row = pos * vocab..(pos + 1) * vocab;
            let (g, w) = (&got[row.clone()], &want[row.clone()]);
            worst = worst.max(nrms(g, w));
            floor_worst = floor_worst.max(nrms(&floor[row.clone()], w));
            let argmax = |v: &[f64]| (0..vocab).fold(0, |a, j| if v[j] > v[a] { j } else { a });
            let mut sorted = w.to_vec();
            sorted.sort_by(|a, b| b.total_cmp(a));
            if sorted[0] - sorted[1] > 1e-3 {
                assert_eq!(argmax(g), argmax(w), "greedy choice at position {pos}");
            }
        }
    }
    eprintln!("deepseek_v4 on the CPU: {worst:.3e} NRMS worst row; transformers' float32 {floor_worst:.3e}");
    assert!(worst <= 4.0 * floor_worst, "CPU vs float64: {worst:e} against 4 × {floor_worst:e}");
}

#[test]
fn each_attention_layer_type_matches_transformers() {
    use plumb_models::layers::compressed_attention::{AttentionKind, AttentionSpec, CompressedAttention, RopeTables};
    use plumb_models::layers::loader::WeightLoader;
    let m = manifest();
    let b = B::new(1);
    let ckpt = HfCheckpoint::open(fixture().join("hf")).unwrap();
    let w = WeightLoader::new(&ckpt, &b);
    let main: Vec<f64> = (0..4).map(|i| 1.0 / 10000f64.powf(i as f64 / 4.0)).collect();
    let compress = yarn_inv_freq(160000.0, 8, 4.0, 64.0, 32.0, 1.0);
    let csa = AttentionKind::Csa { ratio: 4, index_heads: 2, index_head_dim: 16, top_k: 2 };
    let kinds = [AttentionKind::Sliding, csa, AttentionKind::Hca { ratio: 8 }, csa];
    for (i, kind) in kinds.into_iter().enumerate() {
        let name = format!("model.layers.{i}.self_attn");
        let x = traced(&m, &name, "input", 0);
        let n = x.len() / 64;
        let spec = AttentionSpec {
            hidden: 64,
            num_heads: 4,
            head_dim: 32,
            q_lora_rank: 32,
            o_groups: 2,
            o_lora_rank: 16,
            sliding_window: 8,
            eps: 1e-6,
            kind,
        };
        let rows = spec.row_layout(0, 16);
        let attn = CompressedAttention::load(&w, &format!("model.layers.{i}.attn"), spec, rows).unwrap();
        let tokens = vec![0u32; n];
        let blocks = n.div_ceil(16);
        let kv_spec = plumb_core::KvSpec {
            num_layers: rows.num_layers,
            num_kv_heads: 1,
            head_dim: 16,
            block_size: 16,
            num_blocks: blocks,
            lane_state: plumb_core::LaneStateSpec::NONE,
        };
        let mut kv = b.new_kv_cache(&kv_spec);
        let batch = ForwardBatch::single_lane(&tokens, 0, 16, (0..blocks as u32).collect());
        let (t_main, t_compress) = (
            plumb_core::RopeOps::rope_table(&b, &batch.positions, &main),
            plumb_core::RopeOps::rope_table(&b, &batch.positions, &compress),
        );
        let rope = RopeTables { main: &t_main, compress: &t_compress, compress_inv_freq: &compress };
        let out = attn.forward(&b, &tensor(n, 64, x), &batch, &rope, &mut kv, i, &mut None);
        let err = max_rel(&out.data, &traced(&m, &name, "output", 0));
        assert!(err < 1e-13, "layer {i} ({kind:?}) attention: {err:e}");
    }
}

/// `plumb inspect` reads the state size from config.json alone; it must be what the loaded model
/// allocates (2,944 bytes per token on the fixture: 23 KV layers of 2 × 16 f32 columns).
#[test]
fn the_config_alone_gives_the_loaded_models_kv_geometry() {
    let ckpt = HfCheckpoint::open(fixture().join("hf")).unwrap();
    let b = CpuBackend::new(1);
    let model = plumb_models::load_model_with(&ckpt, &b, None).unwrap();
    let from_config = plumb_models::registry::kv_layout((&ckpt).into()).unwrap();
    assert_eq!(from_config, model.kv_spec(1, 0));
    assert_eq!(from_config.bytes_per_position(), 2944);
}
