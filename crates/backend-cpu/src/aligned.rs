//! `Aligned<T>`: a zeroed buffer of plain numbers on a 64-byte boundary, for the Q8 path's
//! repacked weights and packed rows, whose vector loads must not straddle cache lines.

/// Plain numbers whose all-zero bit pattern is a value (what `Aligned` may hold).
pub trait Plain: Copy + Send + Sync + 'static {}
impl Plain for u8 {}
impl Plain for i8 {}
impl Plain for i32 {}
impl Plain for f32 {}

/// A zeroed buffer on a 64-byte boundary: rows whose sizes are multiples of 32 or 64 bytes then
/// never have a vector load split across cache lines.
pub struct Aligned<T: Plain> {
    ptr: std::ptr::NonNull<T>,
    len: usize,
}

// SAFETY: an `Aligned` owns its memory like a `Vec<T>` does, and `T` is `Send + Sync`.
unsafe impl<T: Plain> Send for Aligned<T> {}
// SAFETY: as above; shared access only reads.
unsafe impl<T: Plain> Sync for Aligned<T> {}

impl<T: Plain> Aligned<T> {
    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len.max(1) * size_of::<T>(), 64).expect("a buffer size")
    }

    pub fn zeroed(len: usize) -> Self {
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size; all-zero bits are a value of every `Plain`.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(raw.cast::<T>()).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Aligned { ptr, len }
    }
}

impl<T: Plain> Drop for Aligned<T> {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), Self::layout(self.len)) }
    }
}

impl<T: Plain> std::ops::Deref for Aligned<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialized values (zeroed at allocation) owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Plain> std::ops::DerefMut for Aligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `deref`, borrowed mutably through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Plain> std::fmt::Debug for Aligned<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Aligned<{}>[{}]", std::any::type_name::<T>(), self.len)
    }
}
