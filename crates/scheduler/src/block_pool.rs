//! The pool of KV blocks: ids handed out lowest first, returned on free.

use std::collections::BTreeSet;

#[derive(Debug)]
pub struct BlockPool {
    free: BTreeSet<u32>,
}

impl BlockPool {
    pub fn new(num_blocks: usize) -> Self {
        BlockPool { free: (0..num_blocks as u32).collect() }
    }

    /// `n` blocks, or `None` (and nothing taken) when fewer are free.
    pub fn allocate(&mut self, n: usize) -> Option<Vec<u32>> {
        if self.free.len() < n {
            return None;
        }
        Some((0..n).map(|_| self.free.pop_first().expect("counted above")).collect())
    }

    pub fn free(&mut self, blocks: &[u32]) {
        for &b in blocks {
            let fresh = self.free.insert(b);
            debug_assert!(fresh, "block {b} freed twice");
        }
    }

    pub fn num_free(&self) -> usize {
        self.free.len()
    }
}
