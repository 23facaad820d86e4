//! `HostBytes`: a cheap, shareable view of bytes owned elsewhere (a memory-mapped checkpoint),
//! so weights can stay in the page cache instead of being copied.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A byte range of a shared owner.
#[derive(Clone)]
pub struct HostBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
}

impl HostBytes {
    /// The range `start..start + len` of `owner`; panics if it is out of bounds (callers validate).
    pub fn new(owner: Arc<dyn AsRef<[u8]> + Send + Sync>, start: usize, len: usize) -> Self {
        assert!(start.checked_add(len).is_some_and(|end| end <= (*owner).as_ref().len()), "HostBytes out of range");
        HostBytes { owner, start, len }
    }

    /// The range `start..start + len` of these bytes, sharing the owner; panics if it is out of
    /// bounds (callers validate).
    pub fn slice(&self, start: usize, len: usize) -> Self {
        assert!(start.checked_add(len).is_some_and(|end| end <= self.len), "HostBytes slice out of range");
        HostBytes { owner: self.owner.clone(), start: self.start + start, len }
    }

    /// Owned bytes (for tests and small tensors).
    pub fn from_vec(v: Vec<u8>) -> Self {
        let len = v.len();
        HostBytes { owner: Arc::new(v), start: 0, len }
    }
}

impl Deref for HostBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.start..self.start + self.len]
    }
}

impl fmt::Debug for HostBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostBytes({} bytes at {})", self.len, self.start)
    }
}
