//! Building a bundle: collect named sections, lay them out, stream them to a file atomically.
//!
//! The writer borrows numeric arrays instead of copying them, computes each section's CRC32 when
//! it is added, and streams header, table, sections and footer in one pass, so writing a model
//! never holds a second copy of its weights. The output depends only on the sections and their
//! order, so the same model always gives the same bytes.
//!
//! [`BundleWriter::write_atomic`] writes to a temporary file beside the target, syncs it, renames
//! it over the target and syncs the directory: a reader (or a crash) sees the old file or the new
//! one, never a partial one.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::error::FormatError;
use super::format::{
    Dtype, ENTRY_LEN, Entry, HEADER_LEN, Header, MAX_NAME_LEN, align_up, encode_footer,
    name_problem,
};

/// One section waiting to be written.
struct Pending<'a> {
    name: String,
    dtype: Dtype,
    data: Cow<'a, [u8]>,
    crc: u32,
}

/// Where each section goes, and how long the file is.
struct Layout {
    offsets: Vec<u64>,
    file_len: u64,
}

/// Collects named sections and writes them as one bundle.
///
/// Numeric arrays are borrowed for the writer's lifetime `'a` and never copied.
#[derive(Default)]
pub struct BundleWriter<'a> {
    sections: Vec<Pending<'a>>,
    by_name: HashMap<String, usize>,
}

impl std::fmt::Debug for BundleWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.sections.iter().map(|s| s.name.as_str()).collect();
        f.debug_struct("BundleWriter")
            .field("sections", &names)
            .finish()
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl<'a> BundleWriter<'a> {
    /// An empty writer.
    pub fn new() -> BundleWriter<'a> {
        BundleWriter::default()
    }

    /// The number of sections added so far.
    pub fn section_count(&self) -> usize {
        self.sections.len()
    }

    fn add(
        &mut self,
        name: &str,
        dtype: Dtype,
        data: Cow<'a, [u8]>,
    ) -> Result<&mut Self, FormatError> {
        let index = self.sections.len();
        if let Some(reason) = name_problem(name.as_bytes()) {
            return Err(FormatError::BadName {
                index,
                name: name.to_owned(),
                reason,
            });
        }
        if let Some(&first) = self.by_name.get(name) {
            return Err(FormatError::DuplicateName {
                name: name.to_owned(),
                first,
                second: index,
            });
        }
        let crc = crc32fast::hash(&data);
        self.by_name.insert(name.to_owned(), index);
        self.sections.push(Pending {
            name: name.to_owned(),
            dtype,
            data,
            crc,
        });
        Ok(self)
    }

    /// Adds a section of raw bytes.
    pub fn add_bytes(&mut self, name: &str, data: &'a [u8]) -> Result<&mut Self, FormatError> {
        self.add(name, Dtype::Bytes, Cow::Borrowed(data))
    }

    /// Adds a section of `u32` values.
    pub fn add_u32(&mut self, name: &str, data: &'a [u32]) -> Result<&mut Self, FormatError> {
        self.add(name, Dtype::U32, Cow::Borrowed(le_bytes(data)))
    }

    /// Adds a section of `u32` values that the writer owns.
    pub fn add_u32_owned(&mut self, name: &str, data: Vec<u32>) -> Result<&mut Self, FormatError> {
        self.add(name, Dtype::U32, Cow::Owned(le_bytes(&data).to_vec()))
    }

    /// Adds a section of `u8` values (format version 3 on).
    pub fn add_u8(&mut self, name: &str, data: Cow<'a, [u8]>) -> Result<&mut Self, FormatError> {
        self.add(name, Dtype::U8, data)
    }

    /// Adds a section of `u16` values (format version 3 on).
    pub fn add_u16(&mut self, name: &str, data: Cow<'a, [u16]>) -> Result<&mut Self, FormatError> {
        let bytes = match data {
            Cow::Borrowed(d) => Cow::Borrowed(le_bytes(d)),
            Cow::Owned(d) => Cow::Owned(le_bytes(&d).to_vec()),
        };
        self.add(name, Dtype::U16, bytes)
    }

    /// Adds a section of `u64` values.
    pub fn add_u64(&mut self, name: &str, data: &'a [u64]) -> Result<&mut Self, FormatError> {
        self.add(name, Dtype::U64, Cow::Borrowed(le_bytes(data)))
    }

    /// Adds a section of `f32` values.
    pub fn add_f32(&mut self, name: &str, data: &'a [f32]) -> Result<&mut Self, FormatError> {
        self.add(name, Dtype::F32, Cow::Borrowed(le_bytes(data)))
    }

    /// Serializes `value` as compact JSON and adds it as a section.
    ///
    /// The bytes are deterministic as long as `value` serializes deterministically (a `HashMap`
    /// field, for one, does not; use a `BTreeMap`).
    pub fn add_json<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<&mut Self, FormatError> {
        let text = serde_json::to_vec(value).map_err(|source| FormatError::Json {
            name: name.to_owned(),
            source,
        })?;
        self.add(name, Dtype::Json, Cow::Owned(text))
    }

    /// Places the table right after the header and each section at the next 64-byte boundary
    /// after the previous one, in the order they were added; the footer follows the last.
    fn layout(&self) -> Result<Layout, FormatError> {
        let too_large = |what| FormatError::TooLarge { what };
        u32::try_from(self.sections.len()).map_err(|_| too_large("more than u32::MAX sections"))?;
        let mut pos = (self.sections.len() as u64)
            .checked_mul(ENTRY_LEN)
            .and_then(|t| t.checked_add(HEADER_LEN))
            .ok_or(too_large("section table size"))?;
        let mut offsets = Vec::with_capacity(self.sections.len());
        for s in &self.sections {
            offsets.push(pos);
            pos = (s.data.len() as u64)
                .checked_add(pos)
                .and_then(align_up)
                .ok_or(too_large("file size"))?;
        }
        let file_len = pos
            .checked_add(super::format::FOOTER_LEN)
            .ok_or(too_large("file size"))?;
        Ok(Layout { offsets, file_len })
    }

    /// Streams the whole bundle to `out`.
    fn stream(&self, layout: &Layout, out: &mut impl Write) -> io::Result<()> {
        let mut table = Vec::with_capacity(self.sections.len() * ENTRY_LEN as usize);
        for (s, &offset) in self.sections.iter().zip(&layout.offsets) {
            let mut name = [0u8; MAX_NAME_LEN];
            name[..s.name.len()].copy_from_slice(s.name.as_bytes());
            let entry = Entry {
                name,
                dtype_tag: s.dtype.tag(),
                crc: s.crc,
                offset,
                len: s.data.len() as u64,
                reserved: 0,
            };
            table.extend_from_slice(&entry.encode());
        }
        // `layout` checked that the count fits in u32.
        let count = self.sections.len() as u32;
        let header = Header::encode(count, layout.file_len, crc32fast::hash(&table));
        let mut meta_crc = crc32fast::Hasher::new();
        meta_crc.update(&header);
        meta_crc.update(&table);
        out.write_all(&header)?;
        out.write_all(&table)?;
        const ZEROS: [u8; 64] = [0; 64];
        for s in &self.sections {
            out.write_all(&s.data)?;
            let pad = (64 - s.data.len() % 64) % 64;
            out.write_all(&ZEROS[..pad])?;
        }
        out.write_all(&encode_footer(meta_crc.finalize()))
    }

    /// Streams the whole bundle to `out` (unbuffered: wrap a file in a `BufWriter`), and returns
    /// its length in bytes. The bytes are those [`BundleWriter::to_bytes`] returns, without
    /// holding them all in memory (the content hash of a model streams its bundle this way).
    pub fn write_to(&self, out: &mut impl Write) -> Result<u64, FormatError> {
        let layout = self.layout()?;
        self.stream(&layout, out)
            .map_err(|e| FormatError::io("<stream>", e))?;
        Ok(layout.file_len)
    }

    /// The whole bundle as bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, FormatError> {
        let layout = self.layout()?;
        let mut out = Vec::with_capacity(usize::try_from(layout.file_len).unwrap_or(0));
        self.stream(&layout, &mut out)
            .map_err(|e| FormatError::io("<memory>", e))?;
        Ok(out)
    }

    /// Writes the bundle to `path` atomically and durably, and returns its length in bytes.
    ///
    /// The bytes go to a temporary file in the same directory, which is synced and then renamed
    /// over `path`; the directory is synced last so the rename survives a crash. On any error the
    /// temporary file is removed and `path` keeps its old content.
    pub fn write_atomic(&self, path: impl AsRef<Path>) -> Result<u64, FormatError> {
        let layout = self.layout()?;
        replace_atomically(path.as_ref(), |file| {
            let mut out = BufWriter::with_capacity(1 << 20, file);
            self.stream(&layout, &mut out)?;
            out.flush()
        })?;
        Ok(layout.file_len)
    }
}

/// Views numbers as their little-endian bytes; on the little-endian machines xmc supports that is
/// their memory, so nothing is copied.
fn le_bytes<T: bytemuck::Pod>(data: &[T]) -> &[u8] {
    bytemuck::cast_slice(data)
}

/// Fills a fresh temporary file beside `path` with `fill`, syncs it, renames it to `path` and syncs
/// the directory. The temporary file never survives an error.
fn replace_atomically(
    path: &Path,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<(), FormatError> {
    let file_name = path.file_name().ok_or_else(|| {
        FormatError::io(
            path,
            io::Error::new(io::ErrorKind::InvalidInput, "not a file path"),
        )
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(file_name);
    temp_name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let temp = dir.join(temp_name);
    let mut file = File::options()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(|e| FormatError::io(&temp, e))?;
    let written = fill(&mut file).and_then(|()| file.sync_data());
    drop(file);
    let renamed = written.and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = renamed {
        // The write already failed; a failure to clean up cannot be reported more usefully.
        let _ = std::fs::remove_file(&temp);
        return Err(FormatError::io(&temp, e));
    }
    sync_dir(&dir).map_err(|e| FormatError::io(&dir, e))
}

/// Makes a rename inside `dir` durable.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Directories cannot be opened for syncing here; the rename is as durable as the OS makes it.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_files(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect()
    }

    #[test]
    fn failed_write_keeps_old_content_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.xmcb");
        std::fs::write(&path, b"old model").unwrap();
        let err = replace_atomically(&path, |file| {
            file.write_all(b"half of a new mod")?;
            Err(io::Error::other("simulated disk full"))
        })
        .unwrap_err();
        assert!(err.to_string().contains("simulated disk full"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"old model");
        assert!(temp_files(dir.path()).is_empty());
    }

    #[test]
    fn successful_write_replaces_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.xmcb");
        std::fs::write(&path, b"old model").unwrap();
        let data = [1u32, 2, 3];
        let mut w = BundleWriter::new();
        w.add_u32("a", &data).unwrap();
        let len = w.write_atomic(&path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), w.to_bytes().unwrap());
        assert_eq!(len, std::fs::metadata(&path).unwrap().len());
        assert!(temp_files(dir.path()).is_empty());
    }

    #[test]
    fn writer_rejects_bad_and_duplicate_names() {
        let mut w = BundleWriter::new();
        assert!(matches!(
            w.add_bytes("", b"x"),
            Err(FormatError::BadName { .. })
        ));
        assert!(matches!(
            w.add_bytes("a b", b"x"),
            Err(FormatError::BadName { .. })
        ));
        let long = "n".repeat(33);
        assert!(matches!(
            w.add_bytes(&long, b"x"),
            Err(FormatError::BadName { .. })
        ));
        w.add_bytes("x", b"1").unwrap();
        assert!(matches!(
            w.add_bytes("x", b"2"),
            Err(FormatError::DuplicateName {
                first: 0,
                second: 1,
                ..
            })
        ));
        assert_eq!(w.section_count(), 1);
    }

    #[test]
    fn layout_aligns_every_section_and_the_footer() {
        let a = [0u8; 1];
        let b = [0u8; 64];
        let c = [0u8; 65];
        let mut w = BundleWriter::new();
        w.add_bytes("a", &a)
            .unwrap()
            .add_bytes("b", &b)
            .unwrap()
            .add_bytes("c", &c)
            .unwrap();
        let layout = w.layout().unwrap();
        assert_eq!(layout.offsets, vec![256, 320, 384]);
        assert_eq!(layout.file_len, 384 + 128 + 16);
    }
}
