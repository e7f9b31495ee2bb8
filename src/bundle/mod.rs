//! The model bundle: one immutable, memory-mapped, checksummed file that holds a whole model.
//!
//! A bundle is a container of named, typed arrays ("sections"). It knows nothing about trees,
//! labels or features: each stage stores its arrays as sections and builds its own validated view
//! on top. The container's job is to make those arrays usable straight from a memory map, in
//! constant time, with every structural check done once at open and every failure an error, never
//! a panic.
//!
//! - [`BundleWriter`] collects sections and writes them deterministically and atomically.
//! - [`Bundle`] maps a file (or copies bytes into an aligned buffer), validates its structure in
//!   O(number of sections), and hands out [`Section`]s: zero-copy `&[u8]`/`&[u16]`/`&[u32]`/
//!   `&[u64]`/`&[f32]` views that hold an `Arc` of the bytes and so outlive the `Bundle`.
//! - [`FormatError`] says what is wrong and where.
//!
//! # Byte layout, format versions 1 to 4 (every version this build reads)
//!
//! All integers are little-endian. Offsets are absolute file offsets.
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | **header** | | |
//! | 0 | 8 | magic `58 4d 43 42 00 0d 0a 1a` (`b"XMCB\0\r\n\x1a"`) |
//! | 8 | 4 | endianness mark `0x01020304` (bytes `04 03 02 01`) |
//! | 12 | 4 | format version, `1` to `4` (this build writes `4`) |
//! | 16 | 4 | section count `n` |
//! | 20 | 4 | flags, `0` |
//! | 24 | 8 | file length in bytes |
//! | 32 | 24 | reserved, zero |
//! | 56 | 4 | CRC32 of the section table (bytes `64..64+64n`) |
//! | 60 | 4 | CRC32 of header bytes `0..60` |
//! | **section table**, `n` entries of 64 bytes from offset 64; entry `i` at `64 + 64i` | | |
//! | +0 | 32 | name: 1 to 32 printable ASCII bytes (`0x21..=0x7e`), NUL-padded; unique |
//! | +32 | 4 | dtype tag: 1 `bytes`, 2 `u32`, 3 `u64`, 4 `f32`, 5 `json` (UTF-8); from version 3 also 6 `u8`, 7 `u16` |
//! | +36 | 4 | CRC32 of the section's bytes (padding excluded) |
//! | +40 | 8 | offset of the section: a multiple of 64, at or after `align64(64 + 64n)` |
//! | +48 | 8 | length in bytes: a multiple of the element size (2 for `u16`, 4 for `u32`/`f32`, 8 for `u64`) |
//! | +56 | 8 | reserved, zero |
//! | **sections**, from `align64(64 + 64n)` | | |
//! | | | each section's bytes, followed by zero padding to the next multiple of 64 |
//! | **footer**, the last 16 bytes | | |
//! | len-16 | 4 | CRC32 of header and table (bytes `0..64+64n`) |
//! | len-12 | 4 | reserved, zero |
//! | len-8 | 8 | footer magic `1a 0a 0d 00 42 43 4d 58` (the header magic reversed) |
//!
//! CRC32 is the IEEE polynomial (`crc32fast`). The writer places sections in the order they were
//! added, each at the first 64-byte boundary after the previous one, and the footer at the first
//! boundary after the last; the reader accepts any placement that is aligned, inside the data area
//! and free of overlaps, with zero bytes in every gap.
//!
//! # Versions
//!
//! This build writes version [`FORMAT_VERSION`] and reads versions [`MIN_READ_VERSION`] to
//! [`MAX_READ_VERSION`]. A golden file for each version lives in `tests/data/golden/`, so a change
//! that breaks old files fails the tests.
//!
//! A version is also how a writer stops old readers from misreading what it stores. Version 2
//! has version 1's byte layout; it came with the label trees' weight rows (`*.chunk.row_*`
//! sections), which a reader from before them would skip, scoring the nodes that use them
//! without their weights. Such a reader refuses version 2 instead, and says to upgrade.
//!
//! Version 3 has the same layout and two more dtypes, `u8` and `u16`: a label tree's entry
//! outputs (`*.chunk.entry_out`) are written at the narrowest of `u8`, `u16` and `u32` that holds
//! them. A version-2 reader would refuse the new tags as unknown; refusing version 3 says why.
//! A file of an older version that names a newer dtype is refused as well.
//!
//! Version 4 has version 3's layout and dtypes. It came with packed rows: a `weights = "bf16"`
//! tree stores its rows as bfloat16 pairs (`*.chunk.row_packed`) instead of `f32`s
//! (`*.chunk.row_weight`), with `*.chunk.row_start` counting words. A version-3 reader would
//! find offsets into a `row_weight` section that is not there and refuse the tree with a
//! message about its offsets; refusing version 4 says to upgrade instead.
//!
//! # What is checked when
//!
//! [`Bundle::open`] checks, in O(n): size, magic, endianness mark, version, header CRC, reserved
//! fields, recorded length, that the table fits, table CRC, footer magic and CRC, then for every
//! entry its name, dtype, bounds, alignment and length, and that names are unique and sections do
//! not overlap. [`Bundle::verify_checksums`] then checks, in O(file size), every section CRC and
//! that all padding is zero.
//!
//! # Why `unsafe` is allowed here
//!
//! This is the one module allowed `unsafe`, for exactly one call: creating the memory map. All
//! section access goes through `bytemuck` and is safe code.

#![allow(unsafe_code)]

mod error;
mod format;
mod reader;
mod section;
mod writer;

pub use error::FormatError;
pub use format::{
    ALIGN, Dtype, FORMAT_VERSION, MAGIC, MAX_NAME_LEN, MAX_READ_VERSION, MIN_READ_VERSION,
};
pub use reader::{Bundle, OpenOptions, SectionInfo};
pub use section::Section;
pub use writer::BundleWriter;

/// Maps `file` read-only.
fn map_file(file: &std::fs::File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: `Mmap::map` is unsafe because the mapped bytes change (and safe code reading them
    // would see torn values) if the file is modified in place while mapped. xmc never modifies a
    // bundle in place: bundles are immutable once written, and `BundleWriter::write_atomic`
    // replaces a bundle by renaming a new file over the path, which leaves the mapped inode
    // untouched. The map is read-only and lives inside an `Arc`, so no slice taken from it
    // outlives it. Truncating a mapped bundle from outside xmc would break this and is unsupported.
    unsafe { memmap2::Mmap::map(file) }
}

/// Bytes of one step of a pass over a map: what one call of [`release_pages`],
/// [`advise_will_need`] or [`populate`] advises, and one piece of [`Bundle::verify_checksums`].
const ADVICE_STEP: usize = 1 << 20;

/// The (offset, length) pieces, [`ADVICE_STEP`] long but the last, that cover `len` bytes.
#[cfg(unix)]
fn advice_steps(len: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len)
        .step_by(ADVICE_STEP)
        .map(move |offset| (offset, ADVICE_STEP.min(len - offset)))
}

/// Drops the page-table entries of `map` in [`ADVICE_STEP`] steps, yielding the CPU between
/// them, where the platform supports it.
fn release_pages(map: &memmap2::Mmap) {
    #[cfg(unix)]
    for (offset, len) in advice_steps(map.len()) {
        // SAFETY: `map` is a read-only shared mapping of an immutable bundle file (see
        // `map_file`). MADV_DONTNEED on a shared file mapping only drops page-table entries:
        // any later read of the range refaults the same bytes from the file, so no reference
        // into the map (there may still be some) ever sees different contents. The range is
        // inside the map. A refused hint changes nothing and is ignored.
        let _ =
            unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len) };
        std::thread::yield_now();
    }
    #[cfg(not(unix))]
    let _ = map;
}

/// Maps every page of `map` into the page tables ahead of use, in [`ADVICE_STEP`] pieces, with
/// `MADV_POPULATE_READ` (Linux 5.14 and later): the kernel walks the range itself instead of
/// taking one page fault per group of pages. Calls `step_done` after each piece. Returns false
/// where that is not available, and the caller touches the pages instead.
fn populate(map: &memmap2::Mmap, mut step_done: impl FnMut()) -> bool {
    #[cfg(target_os = "linux")]
    {
        advice_steps(map.len()).all(|(offset, len)| {
            let ok = map
                .advise_range(memmap2::Advice::PopulateRead, offset, len)
                .is_ok();
            step_done();
            ok
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (map, &mut step_done);
        false
    }
}

/// Tells the kernel the whole map will be read soon, where the platform supports it, in
/// [`ADVICE_STEP`] pieces as [`release_pages`] does. Measured, not explained: under swaps, p99
/// during the swaps was lowest in steps, above one call over the whole map and above no advice
/// at all (docs/decisions/0010-loading-under-sched-idle.md); steps also keep the read-ahead for a
/// cold file.
fn advise_will_need(map: &memmap2::Mmap) {
    #[cfg(unix)]
    for (offset, len) in advice_steps(map.len()) {
        // Advice is only a hint; if the kernel refuses it, touching the pages still prefaults.
        let _ = map.advise_range(memmap2::Advice::WillNeed, offset, len);
    }
    #[cfg(not(unix))]
    let _ = map;
}
