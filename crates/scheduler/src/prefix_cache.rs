//! The prefix cache: full blocks of computed tokens, found by the hash chain of their contents.
//! A 64-bit hash is only the lookup key. A hit is confirmed by the block's stored tokens and its
//! parent's identity (the salt for a first block, else the parent's hash and prefix id), so a
//! hash collision can cause a miss but never hands out wrong KV. Invariant: `by_hash` and the
//! blocks' entries are a bijection. Which blocks are free, and eviction order, belong to the pool.

use std::collections::HashMap;

/// Hashes one block: `(parent block's hash or None for the first block, its tokens, salt)`.
/// The salt only enters the first block; later blocks inherit it through the chain.
pub(crate) type BlockHasher = fn(Option<u64>, &[u32], u64) -> u64;

/// The default block hash: a splitmix64 chain over the parent hash (or salt) and the tokens.
/// Deterministic across runs and machines.
pub(crate) fn hash_block(parent: Option<u64>, tokens: &[u32], salt: u64) -> u64 {
    let mut h = match parent {
        None => mix(salt ^ 0x0123_4567_89ab_cdef),
        Some(p) => mix(p ^ 0xfedc_ba98_7654_3210),
    };
    for &t in tokens {
        h = mix(h ^ u64::from(t));
    }
    mix(h ^ tokens.len() as u64)
}

fn mix(z: u64) -> u64 {
    let z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What a cached block's contents follow. A prefix id names one exact token prefix (it is
/// handed out once, when a block is registered, and never reused), so comparing it makes a hit
/// exact even if two different prefixes had the same hash chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parent {
    Root { salt: u64 },
    Block { hash: u64, prefix_id: u64 },
}

impl Parent {
    fn hash(self) -> Option<u64> {
        match self {
            Parent::Root { .. } => None,
            Parent::Block { hash, .. } => Some(hash),
        }
    }

    fn salt(self) -> u64 {
        match self {
            Parent::Root { salt } => salt,
            Parent::Block { .. } => 0,
        }
    }
}

#[derive(Debug)]
struct Entry {
    hash: u64,
    parent: Parent,
    tokens: Box<[u32]>,
    prefix_id: u64,
}

/// The outcome of registering a block.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Registered {
    /// The prefix id the sequence records for this block.
    pub prefix_id: u64,
    /// A block that lost its entry to this one (a collision or a stale chain); if it is free it
    /// should move to the head of the free queue.
    pub displaced: Option<u32>,
}

#[derive(Debug)]
pub(crate) struct PrefixCache {
    hasher: BlockHasher,
    by_hash: HashMap<u64, u32>,
    entries: Vec<Option<Entry>>,
    next_prefix_id: u64,
}

impl PrefixCache {
    pub fn new(num_blocks: usize, hasher: BlockHasher) -> Self {
        PrefixCache {
            hasher,
            by_hash: HashMap::new(),
            entries: (0..num_blocks).map(|_| None).collect(),
            next_prefix_id: 1,
        }
    }

    /// The hash of `tokens` following `parent`.
    pub fn hash(&self, parent: Parent, tokens: &[u32]) -> u64 {
        self.hash_raw(parent.hash(), tokens, parent.salt())
    }

    /// The hash of `tokens` after the block hashed `parent_hash` (or first, with `salt`).
    pub fn hash_raw(&self, parent_hash: Option<u64>, tokens: &[u32], salt: u64) -> u64 {
        (self.hasher)(parent_hash, tokens, if parent_hash.is_none() { salt } else { 0 })
    }

    pub fn num_cached(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_cached(&self, block: u32) -> bool {
        self.entries[block as usize].is_some()
    }

    /// The prefix id and tokens `block` is cached with.
    pub fn entry(&self, block: u32) -> Option<(u64, &[u32])> {
        self.entries[block as usize].as_ref().map(|e| (e.prefix_id, &*e.tokens))
    }

    /// The cached block holding exactly `tokens` after `parent`, and its prefix id.
    pub fn find(&self, hash: u64, parent: Parent, tokens: &[u32]) -> Option<(u32, u64)> {
        let &block = self.by_hash.get(&hash)?;
        let e = self.entries[block as usize].as_ref().expect("by_hash points at cached blocks");
        (e.parent == parent && *e.tokens == *tokens).then_some((block, e.prefix_id))
    }

    /// Records that `block` holds `tokens` after `parent`. If an equal block is cached already,
    /// that one stays the cached copy and `block` stays uncached.
    pub fn register(&mut self, block: u32, hash: u64, parent: Parent, tokens: &[u32]) -> Registered {
        debug_assert!(!self.is_cached(block), "block {block} registered twice");
        if let Some((_, prefix_id)) = self.find(hash, parent, tokens) {
            return Registered { prefix_id, displaced: None };
        }
        let displaced = self.by_hash.remove(&hash);
        if let Some(d) = displaced {
            self.entries[d as usize] = None;
        }
        let prefix_id = self.next_prefix_id;
        self.next_prefix_id += 1;
        self.entries[block as usize] = Some(Entry { hash, parent, tokens: tokens.into(), prefix_id });
        self.by_hash.insert(hash, block);
        Registered { prefix_id, displaced }
    }

    /// Forgets what `block` holds (it is being reallocated).
    pub fn evict(&mut self, block: u32) {
        if let Some(e) = self.entries[block as usize].take() {
            let removed = self.by_hash.remove(&e.hash);
            debug_assert_eq!(removed, Some(block));
        }
    }

    /// Bijection, hashes recomputed from the stored contents, parents consistent, block sizes.
    pub fn check(&self, block_size: usize) -> Result<(), String> {
        let mut hash_of_prefix = HashMap::new();
        for (b, e) in self.entries.iter().enumerate() {
            let Some(e) = e else { continue };
            if self.by_hash.get(&e.hash) != Some(&(b as u32)) {
                return Err(format!("cached block {b}: its hash {:#x} does not map back to it", e.hash));
            }
            if e.tokens.len() != block_size {
                return Err(format!("cached block {b} holds {} tokens", e.tokens.len()));
            }
            if self.hash(e.parent, &e.tokens) != e.hash {
                return Err(format!("cached block {b}: stored hash does not match its tokens and parent"));
            }
            if e.prefix_id == 0 || e.prefix_id >= self.next_prefix_id {
                return Err(format!("cached block {b}: prefix id {} never handed out", e.prefix_id));
            }
            if hash_of_prefix.insert(e.prefix_id, e.hash).is_some() {
                return Err(format!("prefix id {} is cached twice", e.prefix_id));
            }
        }
        if hash_of_prefix.len() != self.by_hash.len() {
            return Err(format!("{} hashes for {} cached blocks", self.by_hash.len(), hash_of_prefix.len()));
        }
        for (b, e) in self.entries.iter().enumerate() {
            if let Some(Entry { parent: Parent::Block { hash, prefix_id }, .. }) = e
                && let Some(parent_hash) = hash_of_prefix.get(prefix_id)
                && parent_hash != hash
            {
                return Err(format!("cached block {b}: parent prefix {prefix_id} has another hash"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collide(_: Option<u64>, _: &[u32], _: u64) -> u64 {
        7
    }

    #[test]
    fn the_chain_depends_on_parent_tokens_and_salt() {
        let a = hash_block(None, &[1, 2], 0);
        assert_ne!(a, hash_block(None, &[1, 2], 1));
        assert_ne!(a, hash_block(None, &[2, 1], 0));
        assert_ne!(hash_block(Some(a), &[3, 4], 0), hash_block(Some(a ^ 1), &[3, 4], 0));
        assert_eq!(hash_block(Some(a), &[3, 4], 0), hash_block(Some(a), &[3, 4], 99), "salt only in the first");
    }

    #[test]
    fn a_colliding_hash_is_a_miss_never_a_wrong_hit() {
        let mut c = PrefixCache::new(4, collide);
        let root = Parent::Root { salt: 0 };
        let r = c.register(0, c.hash(root, &[1, 2]), root, &[1, 2]);
        assert_eq!(r, Registered { prefix_id: 1, displaced: None });
        assert_eq!(c.find(7, root, &[1, 2]), Some((0, 1)));
        assert_eq!(c.find(7, root, &[1, 3]), None, "same hash, other tokens");
        assert_eq!(c.find(7, Parent::Root { salt: 5 }, &[1, 2]), None, "same hash, other salt");
        let child = Parent::Block { hash: 7, prefix_id: 1 };
        assert_eq!(c.find(7, child, &[1, 2]), None, "same hash and tokens, other parent");
        // The newer block takes the key; the old one is displaced and forgotten.
        let r = c.register(1, 7, root, &[1, 3]);
        assert_eq!(r, Registered { prefix_id: 2, displaced: Some(0) });
        assert!(!c.is_cached(0));
        assert_eq!(c.find(7, root, &[1, 2]), None);
        c.check(2).unwrap();
    }

    #[test]
    fn a_stale_parent_is_a_miss() {
        // Prefix ids are never reused: a child registered under prefix 1 does not match a parent
        // that was evicted and recomputed (prefix 2), even with equal hashes and tokens.
        let mut c = PrefixCache::new(4, hash_block);
        let root = Parent::Root { salt: 0 };
        let h0 = c.hash(root, &[1, 2]);
        assert_eq!(c.register(0, h0, root, &[1, 2]).prefix_id, 1);
        let p1 = Parent::Block { hash: h0, prefix_id: 1 };
        let h1 = c.hash(p1, &[3, 4]);
        assert_eq!(c.register(1, h1, p1, &[3, 4]).prefix_id, 2);
        c.evict(0);
        assert_eq!(c.register(2, h0, root, &[1, 2]).prefix_id, 3);
        assert_eq!(c.find(h1, Parent::Block { hash: h0, prefix_id: 3 }, &[3, 4]), None);
        assert_eq!(c.find(h1, p1, &[3, 4]), Some((1, 2)));
        c.check(2).unwrap();
    }

    #[test]
    fn an_equal_block_keeps_the_cached_copy() {
        let mut c = PrefixCache::new(4, hash_block);
        let root = Parent::Root { salt: 0 };
        let h = c.hash(root, &[1, 2]);
        c.register(0, h, root, &[1, 2]);
        assert_eq!(c.register(1, h, root, &[1, 2]), Registered { prefix_id: 1, displaced: None });
        assert!(!c.is_cached(1));
        assert_eq!(c.num_cached(), 1);
    }
}
