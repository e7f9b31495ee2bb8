//! Zero-copy typed views of one section that own a share of the bundle's bytes.
//!
//! A stage builds its query-time view once from a few sections and keeps them for the model's
//! life, so a section must not borrow the [`super::Bundle`] it came from. [`Section`] holds an
//! `Arc` of the backing bytes (a memory map or an aligned heap buffer) and the byte range it
//! covers; dereferencing re-slices the shared bytes and reinterprets them with `bytemuck`, which
//! is safe code. The reader has already checked that the range is inside the bytes, 64-byte
//! aligned and a whole number of elements, so the checks `bytemuck` repeats always pass.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, Range};
use std::sync::Arc;

/// One 64-byte block; a `Vec` of these is a heap buffer whose start is 64-byte aligned.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
pub(crate) struct Block([u8; 64]);

/// The bytes of one bundle, shared by the [`super::Bundle`] and every [`Section`] taken from it.
pub(crate) enum Backing {
    /// A read-only memory map of a bundle file.
    Mmap(memmap2::Mmap),
    /// A copy of a bundle in a 64-byte aligned heap buffer, `len` bytes long.
    Heap {
        /// The blocks; the last may be partly padding.
        blocks: Vec<Block>,
        /// How many bytes are the bundle's.
        len: usize,
    },
}

impl Backing {
    /// Copies `bytes` into a fresh 64-byte aligned buffer.
    pub(crate) fn copy_aligned(bytes: &[u8]) -> Backing {
        let mut blocks = vec![Block([0; 64]); bytes.len().div_ceil(64)];
        let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut blocks);
        dst[..bytes.len()].copy_from_slice(bytes);
        Backing::Heap {
            blocks,
            len: bytes.len(),
        }
    }

    /// The bundle's bytes.
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(map) => map,
            Backing::Heap { blocks, len } => {
                let all: &[u8] = bytemuck::cast_slice(blocks);
                // `len` never exceeds the buffer, because `copy_aligned` sized the buffer from it.
                all.get(..*len).unwrap_or(all)
            }
        }
    }
}

/// A typed, zero-copy, reference-counted view of one section.
///
/// `Section<T>` dereferences to `[T]` and can be cloned cheaply and sent across threads. It keeps
/// the bundle's bytes alive, so it may outlive the [`super::Bundle`] it was taken from.
pub struct Section<T> {
    backing: Arc<Backing>,
    range: Range<usize>,
    _elem: PhantomData<fn() -> T>,
}

impl<T: bytemuck::Pod> Section<T> {
    /// Makes a view of `range`, which the caller has checked lies inside the backing bytes, starts
    /// 64-byte aligned in them and is a multiple of `size_of::<T>()` long.
    pub(crate) fn new(backing: Arc<Backing>, range: Range<usize>) -> Section<T> {
        Section {
            backing,
            range,
            _elem: PhantomData,
        }
    }

    /// The elements, as a slice.
    #[inline]
    pub fn as_slice(&self) -> &[T] {
        let bytes = self.backing.bytes().get(self.range.clone()).unwrap_or(&[]);
        // The reader checked alignment and length when it made this section, so the cast cannot
        // fail; an empty slice is the harmless answer if that invariant were ever broken.
        bytemuck::try_cast_slice(bytes).unwrap_or(&[])
    }

    /// A section over a copy of `data` in a fresh aligned buffer, e.g. to use arrays that are
    /// about to be written as a bundle before they are.
    pub(crate) fn copy_of(data: &[T]) -> Section<T> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        Section::new(Arc::new(Backing::copy_aligned(bytes)), 0..bytes.len())
    }

    /// The length of the section in bytes.
    pub fn byte_len(&self) -> usize {
        self.range.len()
    }
}

impl<T> Clone for Section<T> {
    fn clone(&self) -> Self {
        Section {
            backing: Arc::clone(&self.backing),
            range: self.range.clone(),
            _elem: PhantomData,
        }
    }
}

impl<T: bytemuck::Pod> Deref for Section<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: bytemuck::Pod> AsRef<[T]> for Section<T> {
    fn as_ref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: bytemuck::Pod + fmt::Debug> fmt::Debug for Section<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Section")
            .field("byte_range", &self.range)
            .field("len", &self.as_slice().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_backing_is_aligned_and_exact() {
        let src: Vec<u8> = (0..200u8).collect();
        let b = Backing::copy_aligned(&src);
        assert_eq!(b.bytes(), &src[..]);
        assert_eq!(b.bytes().as_ptr() as usize % 64, 0);
    }

    #[test]
    fn section_reads_typed_and_outlives_nothing_but_its_arc() {
        let mut src = vec![0u8; 128];
        src[64..68].copy_from_slice(&7u32.to_le_bytes());
        src[68..72].copy_from_slice(&9u32.to_le_bytes());
        let s: Section<u32> = Section::new(Arc::new(Backing::copy_aligned(&src)), 64..72);
        let t = s.clone();
        drop(s);
        assert_eq!(&*t, &[7, 9]);
        assert_eq!(t.byte_len(), 8);
    }

    #[test]
    fn sections_are_send_and_sync() {
        fn check<X: Send + Sync>() {}
        check::<Section<f32>>();
    }
}
