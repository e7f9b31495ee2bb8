//! Opening a bundle: map it, check its structure once, then hand out typed sections.
//!
//! [`Bundle::open`] costs O(number of sections), never O(file size): it reads the header, the
//! section table and the footer, and checks every offset, length, name and alignment, but does not
//! touch section bytes, which the kernel pages in lazily. [`Bundle::verify_checksums`] is the
//! separate O(size) pass that reads every byte; it doubles as pre-faulting.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::de::DeserializeOwned;

use super::error::FormatError;
use super::format::{
    ALIGN, Dtype, ENDIAN_MARK, ENTRY_LEN, Entry, FOOTER_LEN, FOOTER_MAGIC, HEADER_LEN, Header,
    MAGIC, MAX_NAME_LEN, MAX_READ_VERSION, MIN_FILE_LEN, MIN_READ_VERSION, align_up, name_problem,
};
use super::section::{Backing, Section};

/// How [`Bundle::open`] treats the file beyond the structural checks it always makes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Check every section's CRC32 before returning (reads the whole file).
    pub verify_checksums: bool,
    /// Ask the kernel to read the whole file ahead and touch every page, so the first queries do
    /// not pay for page faults.
    pub prefault: bool,
    /// Hand the CPU to any other runnable thread (`sched_yield`) after every step of at most
    /// 1 MiB of each pass over the file (pre-faulting, checksums) and every few thousand names a
    /// model on it parses. This is for a loader at the lowest priority beside latency-bound
    /// threads: Linux's scheduler may let a `SCHED_IDLE` thread run on to the next tick (4 ms
    /// here) while a woken request thread waits, and a yield ends that at once. See
    /// `serve::reload`.
    pub yield_between_steps: bool,
}

/// What the section table says about one section.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SectionInfo {
    /// The section's name.
    pub name: String,
    /// Its element type.
    pub dtype: Dtype,
    /// The absolute offset of its first byte.
    pub offset: u64,
    /// Its length in bytes.
    pub byte_len: u64,
    /// The CRC32 of its bytes, as recorded.
    pub crc32: u32,
}

impl SectionInfo {
    /// The number of elements of its dtype.
    pub fn elem_count(&self) -> u64 {
        self.byte_len / self.dtype.elem_size()
    }

    fn range(&self) -> std::ops::Range<usize> {
        // `validate` checked that offset + length fits in the mapped bytes, hence in usize.
        self.offset as usize..(self.offset + self.byte_len) as usize
    }
}

/// An opened, structurally validated bundle.
///
/// Cloning is cheap: clones share the same bytes.
#[derive(Clone)]
pub struct Bundle {
    backing: Arc<Backing>,
    version: u32,
    sections: Vec<SectionInfo>,
    by_name: HashMap<String, usize>,
    /// Per section, whether a typed read has handed it out ([`Bundle::unread_sections`]);
    /// shared by clones.
    read: Arc<[AtomicBool]>,
    /// [`OpenOptions::yield_between_steps`].
    yields: bool,
}

impl std::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bundle")
            .field("version", &self.version)
            .field("file_len", &self.file_len())
            .field("sections", &self.sections)
            .finish()
    }
}

impl Bundle {
    /// The whole bundle's bytes, as mapped (or copied): what writing them to a file gives back.
    pub fn as_bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    /// Maps the file at `path` read-only and validates its structure.
    ///
    /// The file must not be modified in place while it is open; bundles are replaced by renaming a
    /// new file over the old path, as [`super::BundleWriter::write_atomic`] does.
    pub fn open(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Bundle, FormatError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| FormatError::io(path, e))?;
        let len = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
        // Mapping an empty file fails on some systems, and a short file is not a bundle anyway.
        if len < MIN_FILE_LEN {
            return Err(FormatError::TooShort {
                len,
                min: MIN_FILE_LEN,
            });
        }
        let map = super::map_file(&file).map_err(|e| FormatError::io(path, e))?;
        let mut bundle = Bundle::from_backing(Backing::Mmap(map))?;
        bundle.yields = options.yield_between_steps;
        if options.prefault {
            bundle.prefault();
        }
        if options.verify_checksums {
            bundle.verify_checksums()?;
        }
        Ok(bundle)
    }

    /// Copies `bytes` into a 64-byte aligned buffer and validates its structure.
    ///
    /// This is for tests, fuzzing and bundles that never touch a file; it does not verify section
    /// checksums (call [`Bundle::verify_checksums`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<Bundle, FormatError> {
        Bundle::from_backing(Backing::copy_aligned(bytes))
    }

    fn from_backing(backing: Backing) -> Result<Bundle, FormatError> {
        let (version, sections, by_name) = validate(backing.bytes())?;
        let read = sections.iter().map(|_| AtomicBool::new(false)).collect();
        Ok(Bundle {
            backing: Arc::new(backing),
            version,
            sections,
            by_name,
            read,
            yields: false,
        })
    }

    /// Whether this bundle was opened with [`OpenOptions::yield_between_steps`].
    pub fn yields_between_steps(&self) -> bool {
        self.yields
    }

    /// Ends a step of a pass over the bundle: yields the CPU if the bundle was opened with
    /// [`OpenOptions::yield_between_steps`], else does nothing.
    pub fn step_done(&self) {
        if self.yields {
            std::thread::yield_now();
        }
    }

    /// The format version of the file.
    pub fn format_version(&self) -> u32 {
        self.version
    }

    /// The total size of the file in bytes.
    pub fn file_len(&self) -> u64 {
        self.backing.bytes().len() as u64
    }

    /// Every section, in table order.
    pub fn sections(&self) -> &[SectionInfo] {
        &self.sections
    }

    /// The section names, in table order.
    pub fn section_names(&self) -> impl Iterator<Item = &str> {
        self.sections.iter().map(|s| s.name.as_str())
    }

    /// The names of the sections no typed read (`u32s`, `json`, ...) of this bundle or a clone
    /// of it has handed out yet, in table order. Looking a section up with [`Bundle::section`]
    /// does not count as reading it. The section registry's test uses this to find a stored
    /// section that the model never reads.
    pub fn unread_sections(&self) -> Vec<&str> {
        self.sections
            .iter()
            .zip(self.read.iter())
            .filter(|(_, r)| !r.load(Ordering::Relaxed))
            .map(|(s, _)| s.name.as_str())
            .collect()
    }

    /// What the table says about the section called `name`, if there is one.
    pub fn section(&self, name: &str) -> Option<&SectionInfo> {
        self.by_name.get(name).and_then(|&i| self.sections.get(i))
    }

    /// Checks every section's CRC32 and that every padding byte is zero.
    ///
    /// This reads the whole file, so it also faults every page in.
    pub fn verify_checksums(&self) -> Result<(), FormatError> {
        let bytes = self.backing.bytes();
        for s in &self.sections {
            let mut hasher = crc32fast::Hasher::new();
            for piece in bytes[s.range()].chunks(super::ADVICE_STEP) {
                hasher.update(piece);
                self.step_done();
            }
            let computed = hasher.finalize();
            if computed != s.crc32 {
                return Err(FormatError::SectionChecksum {
                    name: s.name.clone(),
                    offset: s.offset,
                    end: s.offset + s.byte_len,
                    stored: s.crc32,
                    computed,
                });
            }
        }
        self.check_padding()
    }

    /// Every byte outside the header, table, sections and footer must be zero padding.
    fn check_padding(&self) -> Result<(), FormatError> {
        let bytes = self.backing.bytes();
        let table_end = HEADER_LEN as usize + self.sections.len() * ENTRY_LEN as usize;
        let footer_start = bytes.len() - FOOTER_LEN as usize;
        let mut covered: Vec<_> = self.sections.iter().map(SectionInfo::range).collect();
        covered.sort_by_key(|r| r.start);
        let mut pos = table_end;
        for r in covered
            .into_iter()
            .chain(std::iter::once(footer_start..footer_start))
        {
            if r.start > pos {
                let gap = &bytes[pos..r.start];
                if let Some(i) = gap.iter().position(|&b| b != 0) {
                    let offset = (pos + i) as u64;
                    return Err(FormatError::PaddingNotZero {
                        offset,
                        value: gap[i],
                    });
                }
            }
            pos = pos.max(r.end);
        }
        Ok(())
    }

    /// Drops this process's page-table entries for a mapped bundle, a few hundred pages at a
    /// time, so that unmapping it later is quick. Meant for a bundle about to be closed, on a
    /// thread of its own: one `munmap` of a whole prefaulted bundle holds the address-space lock
    /// for milliseconds (docs/decisions/0007-release-thread.md), stalling every thread that needs
    /// it meanwhile (page faults, the allocator's `mprotect`). Each step here holds it for a short while only.
    /// The bytes stay readable: a later read refaults them from the file. Copied bundles ignore
    /// it.
    pub fn release_pages(&self) {
        if let Backing::Mmap(map) = &*self.backing {
            super::release_pages(map);
        }
    }

    /// Advises the kernel to read the whole file ahead, then has it populate the page tables, or
    /// where it cannot, touches one byte per page.
    fn prefault(&self) {
        if let Backing::Mmap(map) = &*self.backing {
            super::advise_will_need(map);
            if super::populate(map, || self.step_done()) {
                return;
            }
        }
        let bytes = self.backing.bytes();
        let touched = bytes.iter().step_by(4096).fold(0u8, |acc, &b| acc ^ b);
        std::hint::black_box(touched);
    }

    /// [`Bundle::typed`], or an empty section when the bundle has none called `name`.
    fn typed_or_empty<T: bytemuck::Pod>(
        &self,
        name: &str,
        dtype: Dtype,
    ) -> Result<Section<T>, FormatError> {
        if self.section(name).is_none() {
            return Ok(Section::new(Arc::clone(&self.backing), 0..0));
        }
        self.typed(name, dtype)
    }

    fn typed<T: bytemuck::Pod>(&self, name: &str, dtype: Dtype) -> Result<Section<T>, FormatError> {
        let (index, info) = self
            .by_name
            .get(name)
            .and_then(|&i| Some((i, self.sections.get(i)?)))
            .ok_or_else(|| FormatError::NoSuchSection {
                name: name.to_owned(),
            })?;
        if info.dtype != dtype {
            return Err(FormatError::WrongDtype {
                name: name.to_owned(),
                expected: dtype,
                found: info.dtype,
            });
        }
        if let Some(read) = self.read.get(index) {
            read.store(true, Ordering::Relaxed);
        }
        Ok(Section::new(Arc::clone(&self.backing), info.range()))
    }

    /// The `bytes` section called `name`.
    pub fn bytes(&self, name: &str) -> Result<Section<u8>, FormatError> {
        self.typed(name, Dtype::Bytes)
    }

    /// The `u32` section called `name`, zero-copy.
    pub fn u32s(&self, name: &str) -> Result<Section<u32>, FormatError> {
        self.typed(name, Dtype::U32)
    }

    /// The `u32` section called `name`, or an empty one when the bundle has no such section (for
    /// sections that later versions added). A section of that name with another dtype is still
    /// refused.
    pub fn u32s_or_empty(&self, name: &str) -> Result<Section<u32>, FormatError> {
        self.typed_or_empty(name, Dtype::U32)
    }

    /// The `u8` section called `name`, zero-copy.
    pub fn u8s(&self, name: &str) -> Result<Section<u8>, FormatError> {
        self.typed(name, Dtype::U8)
    }

    /// The `u8` section called `name`, or an empty one when the bundle has no such section (as
    /// [`Bundle::u32s_or_empty`]).
    pub fn u8s_or_empty(&self, name: &str) -> Result<Section<u8>, FormatError> {
        self.typed_or_empty(name, Dtype::U8)
    }

    /// The `u16` section called `name`, zero-copy.
    pub fn u16s(&self, name: &str) -> Result<Section<u16>, FormatError> {
        self.typed(name, Dtype::U16)
    }

    /// The `u64` section called `name`, zero-copy.
    pub fn u64s(&self, name: &str) -> Result<Section<u64>, FormatError> {
        self.typed(name, Dtype::U64)
    }

    /// The `f32` section called `name`, zero-copy.
    pub fn f32s(&self, name: &str) -> Result<Section<f32>, FormatError> {
        self.typed(name, Dtype::F32)
    }

    /// The `f32` section called `name`, or an empty one when the bundle has no such section (as
    /// [`Bundle::u32s_or_empty`]).
    pub fn f32s_or_empty(&self, name: &str) -> Result<Section<f32>, FormatError> {
        self.typed_or_empty(name, Dtype::F32)
    }

    /// The raw text of the `json` section called `name`.
    pub fn json_text(&self, name: &str) -> Result<Section<u8>, FormatError> {
        self.typed(name, Dtype::Json)
    }

    /// Deserializes the `json` section called `name`.
    pub fn json<T: DeserializeOwned>(&self, name: &str) -> Result<T, FormatError> {
        self.json_with(name, |text| serde_json::from_slice(text))
    }

    /// Reads the `json` section called `name` with `parse`, naming the section in its error.
    pub fn json_with<T>(
        &self,
        name: &str,
        parse: impl FnOnce(&[u8]) -> serde_json::Result<T>,
    ) -> Result<T, FormatError> {
        let text = self.json_text(name)?;
        parse(&text).map_err(|source| FormatError::Json {
            name: name.to_owned(),
            source,
        })
    }
}

/// What [`validate`] finds: the format version, the sections in table order, and their index by
/// name.
type Validated = (u32, Vec<SectionInfo>, HashMap<String, usize>);

/// Checks everything about `bytes` that does not need reading section contents, and returns the
/// format version, the section table and an index of it by name.
fn validate(bytes: &[u8]) -> Result<Validated, FormatError> {
    if cfg!(target_endian = "big") {
        return Err(FormatError::BigEndianHost);
    }
    let len = bytes.len() as u64;
    let head = match bytes.first_chunk::<{ HEADER_LEN as usize }>() {
        Some(head) if len >= MIN_FILE_LEN => head,
        _ => {
            return Err(FormatError::TooShort {
                len,
                min: MIN_FILE_LEN,
            });
        }
    };
    let header = Header::decode(head);
    check_header(head, &header, len)?;

    let count = header.section_count;
    let footer_start = len - FOOTER_LEN;
    let table_end = HEADER_LEN + u64::from(count) * ENTRY_LEN;
    if table_end > footer_start {
        return Err(FormatError::TableOutOfBounds {
            count,
            table_end,
            footer_start,
        });
    }
    // Both ends are below `len`, which is a slice length, so they fit in usize.
    let table = &bytes[HEADER_LEN as usize..table_end as usize];
    let computed = crc32fast::hash(table);
    if computed != header.table_crc {
        return Err(FormatError::TableChecksum {
            stored: header.table_crc,
            computed,
            table_end,
        });
    }
    check_footer(bytes, table_end as usize)?;

    let data_start = align_up(table_end).unwrap_or(u64::MAX);
    let mut sections = Vec::with_capacity(count as usize);
    let mut by_name = HashMap::with_capacity(count as usize);
    for (index, raw) in table.chunks_exact(ENTRY_LEN as usize).enumerate() {
        let Some(raw) = raw.first_chunk::<{ ENTRY_LEN as usize }>() else {
            continue;
        };
        let entry = Entry::decode(raw);
        let name_field = &raw[..MAX_NAME_LEN];
        let name_len = name_field
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(MAX_NAME_LEN);
        let name_bytes = &name_field[..name_len];
        let info = check_entry(
            index,
            &entry,
            name_bytes,
            header.version,
            data_start..footer_start,
        )?;
        if let Some(first) = by_name.insert(info.name.clone(), index) {
            return Err(FormatError::DuplicateName {
                name: info.name,
                first,
                second: index,
            });
        }
        sections.push(info);
    }
    check_overlaps(&sections)?;
    Ok((header.version, sections, by_name))
}

fn check_header(
    head: &[u8; HEADER_LEN as usize],
    header: &Header,
    len: u64,
) -> Result<(), FormatError> {
    if header.magic != MAGIC {
        let hint = if header.magic[..4] == MAGIC[..4] {
            " (the start matches: the file was probably mangled by a text-mode transfer; copy it in binary mode)"
        } else {
            ""
        };
        return Err(FormatError::BadMagic {
            found: header.magic,
            expected: MAGIC,
            hint,
        });
    }
    if header.endian_mark != ENDIAN_MARK {
        let hint = if header.endian_mark == ENDIAN_MARK.swap_bytes() {
            " (it is byte-swapped: the bundle was written big-endian)"
        } else {
            ""
        };
        return Err(FormatError::BadEndianMark {
            found: header.endian_mark,
            hint,
        });
    }
    // The version is checked before the checksum, because a future version may lay the rest of the
    // header out differently, and "upgrade xmc" is the useful message then.
    if !(MIN_READ_VERSION..=MAX_READ_VERSION).contains(&header.version) {
        let advice = if header.version > MAX_READ_VERSION {
            "upgrade xmc or re-train the model"
        } else {
            "re-train the model with this xmc"
        };
        return Err(FormatError::UnsupportedVersion {
            found: header.version,
            min: MIN_READ_VERSION,
            max: MAX_READ_VERSION,
            advice,
        });
    }
    let computed = crc32fast::hash(&head[..60]);
    if computed != header.header_crc {
        return Err(FormatError::HeaderChecksum {
            stored: header.header_crc,
            computed,
        });
    }
    if header.flags != 0 {
        return Err(FormatError::ReservedNotZero {
            field: "header flags (bytes 20..24)".into(),
        });
    }
    if header.reserved != [0; 24] {
        return Err(FormatError::ReservedNotZero {
            field: "header bytes 32..56".into(),
        });
    }
    if header.file_len != len {
        return Err(FormatError::LengthMismatch {
            recorded: header.file_len,
            actual: len,
        });
    }
    Ok(())
}

fn check_footer(bytes: &[u8], table_end: usize) -> Result<(), FormatError> {
    let footer_start = bytes.len() - FOOTER_LEN as usize;
    let footer = &bytes[footer_start..];
    if footer[8..16] != FOOTER_MAGIC {
        return Err(FormatError::BadFooterMagic {
            offset: footer_start as u64 + 8,
        });
    }
    if footer[4..8] != [0; 4] {
        return Err(FormatError::ReservedNotZero {
            field: format!("footer bytes {}..{}", footer_start + 4, footer_start + 8),
        });
    }
    let stored = u32::from_le_bytes([footer[0], footer[1], footer[2], footer[3]]);
    let computed = crc32fast::hash(&bytes[..table_end]);
    if computed != stored {
        return Err(FormatError::FooterChecksum { stored, computed });
    }
    Ok(())
}

/// Checks table entry `index` of a file of format `version`, whose sections must lie in `data`.
fn check_entry(
    index: usize,
    entry: &Entry,
    name_bytes: &[u8],
    version: u32,
    data: std::ops::Range<u64>,
) -> Result<SectionInfo, FormatError> {
    let (data_start, data_end) = (data.start, data.end);
    let name = String::from_utf8_lossy(name_bytes).into_owned();
    let padding_is_zero = entry.name[name_bytes.len()..].iter().all(|&b| b == 0);
    let reason = name_problem(name_bytes)
        .or_else(|| (!padding_is_zero).then_some("the name has a NUL byte followed by more bytes"));
    if let Some(reason) = reason {
        return Err(FormatError::BadName {
            index,
            name,
            reason,
        });
    }
    let Some(dtype) = Dtype::from_tag(entry.dtype_tag).filter(|d| d.since() <= version) else {
        return Err(FormatError::UnknownDtype {
            name,
            tag: entry.dtype_tag,
        });
    };
    if entry.reserved != 0 {
        return Err(FormatError::ReservedNotZero {
            field: format!("bytes 56..64 of the table entry for section {name:?}"),
        });
    }
    let end = entry.offset.checked_add(entry.len);
    if entry.offset < data_start || end.is_none_or(|e| e > data_end) {
        return Err(FormatError::SectionOutOfBounds {
            name,
            offset: entry.offset,
            end: end.unwrap_or(u64::MAX),
            data_start,
            data_end,
        });
    }
    if entry.offset % ALIGN != 0 {
        return Err(FormatError::Misaligned {
            name,
            offset: entry.offset,
        });
    }
    if entry.len % dtype.elem_size() != 0 {
        return Err(FormatError::LengthNotMultiple {
            name,
            dtype,
            len: entry.len,
            size: dtype.elem_size(),
        });
    }
    Ok(SectionInfo {
        name,
        dtype,
        offset: entry.offset,
        byte_len: entry.len,
        crc32: entry.crc,
    })
}

/// Fails if two non-empty sections share a byte. Empty sections own no bytes and never overlap.
fn check_overlaps(sections: &[SectionInfo]) -> Result<(), FormatError> {
    let mut order: Vec<&SectionInfo> = sections.iter().filter(|s| s.byte_len > 0).collect();
    order.sort_by_key(|s| s.offset);
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.offset + a.byte_len > b.offset {
            return Err(FormatError::Overlap {
                first: a.name.clone(),
                first_start: a.offset,
                first_end: a.offset + a.byte_len,
                second: b.name.clone(),
                second_start: b.offset,
            });
        }
    }
    Ok(())
}
