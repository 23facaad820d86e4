//! Where DeepSeek V4's attention keeps a sequence's state: every piece of it is a row per
//! position in the paged KV cache (`CompressedAttentionOps::write_paged_rows`), so blocks,
//! the prefix cache, preemption and chunked prefill treat it exactly as they treat K and V.
//! Per position p of a layer, its paged row holds:
//! - the raw K (= V) row (every layer): the sliding window reads positions (p − W, p];
//! - the compressor's kv and gate rows (and the indexer's, CSA): pooled when a window completes;
//! - where p = w·m + m − 1 completes window w, entry w (and its indexer key, CSA), written by
//!   the step that computes position p, into the block that holds p.
//!
//! Invariant (what makes cached state exact): everything stored at p is a function of the
//! tokens at positions ≤ p, written by the step that computes p and never changed after. A
//! full block therefore holds the same bits whichever request, chunking or batch computed it,
//! so a prefix-cache hit at any block boundary — inside a compression window too — continues
//! exactly as a miss. Every value a step uses is read back as stored, never taken from the
//! step's own tensors, so a 16-bit KV store rounds it the same way in every schedule.

use plumb_core::ForwardBatch;

/// The columns of one layer's paged row (`plumb_core::paged_segments`): raw K at 0, then, for
/// compressed layers, the entry, the indexer key (CSA), the compressor's kv and gate rows and
/// the indexer compressor's kv and gate rows (CSA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowLayout {
    /// First KV layer of the cache this layer's rows use.
    pub first_layer: usize,
    /// KV layers they take (each 2 · head_dim columns: its K then its V plane).
    pub num_layers: usize,
    pub entry: usize,
    pub key: usize,
    /// The compressor's kv rows; its gate rows follow them (each as wide as its `wkv`).
    pub comp: usize,
    /// The indexer compressor's kv rows; its gate rows follow them.
    pub index_comp: usize,
    pub width: usize,
}

impl RowLayout {
    /// The layout of a layer with K rows of `d`, compressor rows of `comp_width` (0: none),
    /// indexer keys of `key_width` and indexer compressor rows of `index_comp_width` (0: none),
    /// placed from KV layer `first_layer` of a cache whose heads are `kv_head_dim` wide.
    pub fn new(
        first_layer: usize,
        kv_head_dim: usize,
        d: usize,
        comp_width: usize,
        key_width: usize,
        index_comp_width: usize,
    ) -> Self {
        let entry = d;
        let entry_width = if comp_width > 0 { d } else { 0 };
        let key = entry + entry_width;
        let comp = key + key_width;
        let index_comp = comp + 2 * comp_width;
        let width = index_comp + 2 * index_comp_width;
        let num_layers = width.div_ceil(2 * kv_head_dim);
        RowLayout { first_layer, num_layers, entry, key, comp, index_comp, width }
    }
}

/// One lane's rows of a step: its batch rows in position order, at positions `lo ..= hi`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneRows {
    pub lane: usize,
    pub rows: Vec<usize>,
    pub lo: usize,
    pub hi: usize,
}

impl LaneRows {
    /// The KV slots of `positions` in this lane.
    pub fn slots(&self, batch: &ForwardBatch, positions: impl Iterator<Item = usize>) -> Vec<u32> {
        positions.map(|p| batch.slot(self.lane, p) as u32).collect()
    }
}

/// The batch's rows grouped by lane (lanes in order of first appearance). A lane's rows must be
/// at consecutive positions (a runner bug otherwise): a completed window's rows before this
/// step's are in the cache, and its rows in this step are written before any window is pooled.
pub fn lane_rows(batch: &ForwardBatch) -> Vec<LaneRows> {
    let mut out: Vec<LaneRows> = Vec::new();
    for r in 0..batch.num_rows() {
        let (lane, p) = (batch.row_lane[r] as usize, batch.positions[r] as usize);
        match out.iter_mut().find(|l| l.lane == lane) {
            Some(l) => {
                assert_eq!(p, l.hi + 1, "row {r}: a lane's rows must be at consecutive positions");
                l.rows.push(r);
                l.hi = p;
            }
            None => out.push(LaneRows { lane, rows: vec![r], lo: p, hi: p }),
        }
    }
    out
}

/// The windows of `ratio` that `lane`'s rows complete this step: w_lo .. w_hi.
pub fn completed_windows(lane: &LaneRows, ratio: usize) -> std::ops::Range<usize> {
    lane.lo / ratio..(lane.hi + 1) / ratio
}

/// The position that completes window `w` of `ratio`, whose row stores entry w.
pub fn entry_position(w: usize, ratio: usize) -> usize {
    w * ratio + ratio - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_pack_the_rows_and_count_kv_layers() {
        // CSA at d 32, indexer keys 16, compressor rows 64 (two series), indexer rows 32.
        let csa = RowLayout::new(3, 16, 32, 64, 16, 32);
        assert_eq!((csa.entry, csa.key, csa.comp, csa.index_comp, csa.width), (32, 64, 80, 208, 272));
        assert_eq!((csa.first_layer, csa.num_layers), (3, 9));
        let sliding = RowLayout::new(0, 16, 32, 0, 0, 0);
        assert_eq!((sliding.width, sliding.num_layers), (32, 1));
    }

    #[test]
    fn windows_complete_where_their_last_position_is() {
        let lane = |lo, hi| LaneRows { lane: 0, rows: Vec::new(), lo, hi };
        assert_eq!(completed_windows(&lane(0, 2), 4), 0..0);
        assert_eq!(completed_windows(&lane(0, 3), 4), 0..1);
        assert_eq!(completed_windows(&lane(3, 3), 4), 0..1);
        assert_eq!(completed_windows(&lane(4, 11), 4), 1..3);
        assert_eq!(completed_windows(&lane(5, 6), 4), 1..1);
        assert_eq!(entry_position(2, 4), 11);
    }
}
