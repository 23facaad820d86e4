//! The blocks' time stamps (`PLUMB_CUDA_TIMELINE`, timeline.rs): with graphs on, the decode steps
//! of the window it names are recorded, every block of each of their launches once, each named
//! after its kernel, each ending after it starts, with its wait on the kernel before in between.

#[path = "support/device.rs"]
mod device;
#[path = "../../verify/tests/support/tiny_model.rs"]
mod tiny_model;

use plumb_backend_cuda::timeline::BlockStamp;
use plumb_checkpoint::GgufFile;
use plumb_core::{Backend, ForwardBatch};
use std::collections::BTreeMap;

const BLOCK: usize = 16;

#[test]
fn a_timeline_records_every_block_of_its_decode_steps() {
    let csv = std::env::temp_dir().join(format!("plumb-timeline-test-{}.csv", std::process::id()));
    // SAFETY: this test binary holds one test, so no other thread reads the environment meanwhile.
    unsafe {
        std::env::set_var("PLUMB_CUDA_TIMELINE", &csv);
        std::env::set_var("PLUMB_CUDA_TIMELINE_STEPS", "2:3");
    }
    let Some(b) = device::backend("timeline") else { return };
    let path = tiny_model::write_with(7, tiny_model::Extras { heads: Some(2), ..Default::default() });
    let file = GgufFile::open(&path).unwrap();
    let model = plumb_models::load_model(&file, &b).unwrap();
    let table: Vec<u32> = (0..8).collect();
    let mut kv = b.new_kv_cache(&model.kv_spec(BLOCK, 8));
    let prompt: Vec<u32> = (0..9).map(|i| (i * 5 % tiny_model::VOCAB) as u32).collect();
    let mut batch = ForwardBatch::single_lane(&prompt, 0, BLOCK, table.clone());
    batch.logits_rows = vec![prompt.len() as u32 - 1];
    b.download(&model.forward(&b, &batch, &mut kv, None));
    // Eight decode steps of one row: the timeline records the third to the fifth.
    for pos in prompt.len()..prompt.len() + 8 {
        let mut batch = ForwardBatch::single_lane(&[3], pos, BLOCK, table.clone());
        batch.logits_rows = vec![0];
        b.download(&model.forward(&b, &batch, &mut kv, None));
    }
    let stamps = b.timeline_stamps().unwrap();
    assert!(!stamps.is_empty(), "nothing recorded");
    // A launch is (step, grid): a graph's replays keep their nodes' %gridid (as the emulator
    // now does too), so the grid alone would merge the steps' launches.
    let mut launches: BTreeMap<(u32, u64), Vec<&BlockStamp>> = BTreeMap::new();
    for s in &stamps {
        assert!(s.start_ns <= s.end_ns, "a block ends before it starts: {s:?}");
        // Every kernel's thread 0 waits on the kernel before (PDL_WAIT), between its two stamps.
        assert!(s.start_ns <= s.wait_ns && s.wait_ns <= s.end_ns, "a block's wait is not inside it: {s:?}");
        launches.entry((s.step, s.grid)).or_default().push(s);
    }
    for (launch, blocks) in &launches {
        let mut idx: Vec<u32> = blocks.iter().map(|s| s.block).collect();
        idx.sort_unstable();
        assert!(idx.iter().enumerate().all(|(i, &b)| i as u32 == b), "launch {launch:?}: blocks {idx:?}");
        assert!(blocks.iter().all(|s| s.kernel == blocks[0].kernel), "launch {launch:?}: two kernels");
    }
    // Three decode steps, numbered 0 to 2, each with the same launches of the same kernels.
    let per_step = |step: u32| -> Vec<u32> {
        let mut k: Vec<u32> = launches.iter().filter(|((s, _), _)| *s == step).map(|(_, b)| b[0].kernel).collect();
        k.sort_unstable();
        k
    };
    assert!(launches.keys().all(|(s, _)| *s < 3), "a step past the window: {:?}", launches.keys().last());
    assert!(!per_step(0).is_empty(), "the window's first step recorded nothing");
    assert!(per_step(1) == per_step(0) && per_step(2) == per_step(0), "the three steps launch different kernels");
    let summary = b.timeline_summary().unwrap();
    eprint!("{summary}");
    assert!(!summary.lines().skip(2).any(|l| l.starts_with('?')), "a kernel without a name:\n{summary}");
    drop(b);
    let written = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(written.lines().count(), stamps.len() + 1, "the CSV holds every block and a header");
    if std::env::var_os("PLUMB_TIMELINE_TEST_KEEP").is_none() {
        std::fs::remove_file(&csv).unwrap();
    }
    std::fs::remove_file(path).unwrap();
}
