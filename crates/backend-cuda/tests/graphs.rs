//! CUDA graphs for decode steps (GPU.md, "Decode steps replay CUDA graphs"): a whole model's
//! decode steps, run once with graphs (padded to their bucket, captured, then replayed at new
//! positions) and once launch by launch with no padding, give bit-identical logits — for batch
//! sizes that fill a bucket and ones that leave padded rows, at positions across KV blocks.

#[path = "support/device.rs"]
mod device;
#[path = "../../verify/tests/support/tiny_model.rs"]
mod tiny_model;

use plumb_backend_cuda::CudaBackend;
use plumb_checkpoint::GgufFile;
use plumb_core::{Backend, ForwardBatch, LaneView};
use plumb_models::CausalLm;
use plumb_verify::inputs::Rng;

const LANES: usize = 8;
const BLOCK: usize = 16;
const BLOCKS_PER_LANE: usize = 8;

/// One step: the lanes that decode and the token each feeds.
type Step = Vec<(usize, u32)>;

/// Every step's logits ([rows, vocab] each), from prefilling each lane's prompt in one pass, then
/// the decode `steps`.
fn run(b: &CudaBackend, model: &dyn CausalLm<CudaBackend>, prompts: &[Vec<u32>], steps: &[Step]) -> Vec<Vec<f32>> {
    let lanes: Vec<LaneView> = (0..LANES)
        .map(|l| LaneView {
            block_table: (0..BLOCKS_PER_LANE as u32).map(|i| (l * BLOCKS_PER_LANE) as u32 + i).collect(),
        })
        .collect();
    let mut kv = b.new_kv_cache(&model.kv_spec(BLOCK, LANES * BLOCKS_PER_LANE));
    let mut lens = [0usize; LANES];
    let mut out = Vec::new();
    for (lane, prompt) in prompts.iter().enumerate() {
        let mut batch = ForwardBatch::single_lane(prompt, 0, BLOCK, lanes[lane].block_table.clone());
        batch.logits_rows = vec![prompt.len() as u32 - 1];
        out.push(b.download(&model.forward(b, &batch, &mut kv, None)));
        lens[lane] = prompt.len();
    }
    for step in steps {
        let mut batch = ForwardBatch { block_size: BLOCK, lanes: lanes.clone(), ..Default::default() };
        for &(lane, token) in step {
            batch.push_row(lane, token, lens[lane]);
            lens[lane] += 1;
        }
        batch.logits_rows = (0..step.len() as u32).collect();
        out.push(b.download(&model.forward(b, &batch, &mut kv, None)));
    }
    out
}

#[test]
fn graph_replay_gives_the_eager_logits_bit_for_bit() {
    let Some(b) = device::backend("graphs") else { return };
    let mut rng = Rng::new(device::seed());
    let path = tiny_model::write_with(31, tiny_model::Extras { heads: Some(2), ..Default::default() });
    let file = GgufFile::open(&path).unwrap();
    let model = plumb_models::load_model(&file, &b).unwrap();
    let vocab = tiny_model::VOCAB;
    let prompts: Vec<Vec<u32>> =
        (0..LANES).map(|_| (0..5 + rng.below(30)).map(|_| rng.below(vocab) as u32).collect()).collect();
    // Runs of equal batch sizes, so each bucket is captured and then replayed at later positions;
    // 3, 5 and 6 rows leave padded rows in buckets of 4 and 8.
    let sizes = [1, 1, 1, 1, 1, 8, 8, 8, 8, 8, 3, 3, 3, 3, 3, 5, 5, 5, 5, 2, 2, 2, 2, 6, 6, 6, 6, 6, 1, 1];
    let steps: Vec<Step> = sizes
        .iter()
        .map(|&m| {
            let first = rng.below(LANES - m + 1);
            (first..first + m).map(|lane| (lane, rng.below(vocab) as u32)).collect()
        })
        .collect();

    b.set_graphs(false);
    let eager = run(&b, model.as_ref(), &prompts, &steps);
    assert_eq!(b.graph_stats().num_replayed + b.graph_stats().num_captured, 0, "graphs ran while off");
    b.set_graphs(true);
    // Segments of the segment length from the first (ramping up is the default; it runs below).
    b.set_graph_ramp(false);
    let graphed = run(&b, model.as_ref(), &prompts, &steps);
    let stats = b.graph_stats();
    eprintln!("graph steps: {stats:?}");
    // Buckets 1, 2, 4 and 8 each captured at least once; 5 and 6 rows replay the bucket-8 graph.
    assert!(stats.num_captured >= 4, "every bucket should have been captured: {stats:?}");
    assert!(stats.num_replayed >= 10, "decode steps should replay their graphs: {stats:?}");

    // Steps in segments of 7 launches (a graph each, submitted as the step is recorded), and in
    // one graph each.
    b.set_graph_segment(7);
    let segmented = run(&b, model.as_ref(), &prompts, &steps);
    let more = b.graph_stats();
    eprintln!("graph segments of 7 launches: {more:?}");
    assert!(more.num_captured >= stats.num_captured + 8, "segments should have been captured: {more:?}");
    assert!(more.num_replayed >= stats.num_replayed + 20, "segments should replay: {more:?}");
    // Segments ramping up (8, 16, 32, then 40 launches).
    b.set_graph_segment(40);
    b.set_graph_ramp(true);
    let ramped = run(&b, model.as_ref(), &prompts, &steps);
    let after_ramp = b.graph_stats();
    eprintln!("ramped graph segments: {after_ramp:?}");
    assert!(after_ramp.num_replayed >= more.num_replayed + 20, "ramped segments should replay: {after_ramp:?}");
    b.set_graph_ramp(false);
    b.set_graph_segment(0);
    let whole = run(&b, model.as_ref(), &prompts, &steps);

    for (how, graphed) in [
        ("graphs", &graphed),
        ("graph segments", &segmented),
        ("ramped graph segments", &ramped),
        ("a graph per step", &whole),
    ] {
        assert_eq!(eager.len(), graphed.len());
        for (i, (e, g)) in eager.iter().zip(graphed).enumerate() {
            assert_eq!(e.len(), g.len(), "step {i}: logits size");
            assert!(g.iter().all(|x| x.is_finite()), "step {i}: non-finite logits with {how}");
            if let Some(j) = e.iter().zip(g).position(|(x, y)| x.to_bits() != y.to_bits()) {
                let what =
                    if i < LANES { "prefill".to_string() } else { format!("decode of {} rows", sizes[i - LANES]) };
                panic!("step {i} ({what}): logit {j} differs with {how}: {} vs {}", g[j], e[j]);
            }
        }
    }
    std::fs::remove_file(path).unwrap();
}
