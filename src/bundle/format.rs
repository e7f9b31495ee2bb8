//! The byte layout of a bundle: constants, the header, section-table entries and the footer.
//!
//! This module only encodes and decodes fixed-size records; it checks nothing beyond what a record
//! needs to be read at all. The reader decides what a valid file is, and the writer decides where
//! sections go. Keeping the offsets in one place means the module-level table in [`crate::bundle`]
//! has a single source of truth in code.

use std::fmt;

/// The first eight bytes of every bundle. The `\0`, `\r\n` and `\x1a` bytes are there so that a
/// text-mode transfer (newline translation, truncation at a NUL or at Ctrl-Z) is caught at once.
pub const MAGIC: [u8; 8] = *b"XMCB\0\r\n\x1a";

/// The last eight bytes of every bundle: the header magic reversed, so a file cut short or padded
/// at the end is caught.
pub const FOOTER_MAGIC: [u8; 8] = *b"\x1a\n\r\0BCMX";

/// The endianness mark, stored little-endian (bytes `04 03 02 01`).
pub const ENDIAN_MARK: u32 = 0x0102_0304;

/// The format version this code writes.
pub const FORMAT_VERSION: u32 = 4;

/// The oldest format version this code reads.
pub const MIN_READ_VERSION: u32 = 1;

/// The newest format version this code reads.
pub const MAX_READ_VERSION: u32 = 4;

/// Every section, the section table and the footer start at a multiple of this many bytes.
pub const ALIGN: u64 = 64;

/// The size of the header, in bytes.
pub const HEADER_LEN: u64 = 64;

/// The size of one section-table entry, in bytes.
pub const ENTRY_LEN: u64 = 64;

/// The size of the footer, in bytes.
pub const FOOTER_LEN: u64 = 16;

/// The longest section name, in bytes.
pub const MAX_NAME_LEN: usize = 32;

/// The smallest possible bundle: a header, an empty table and a footer.
pub const MIN_FILE_LEN: u64 = HEADER_LEN + FOOTER_LEN;

/// The element type of a section, which decides how it may be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// Raw bytes.
    Bytes,
    /// Little-endian `u32` values.
    U32,
    /// Little-endian `u64` values.
    U64,
    /// Little-endian IEEE-754 `f32` values.
    F32,
    /// UTF-8 JSON text.
    Json,
    /// `u8` values (format version 3 on).
    U8,
    /// Little-endian `u16` values (format version 3 on).
    U16,
}

impl Dtype {
    /// The tag stored in the section table.
    pub const fn tag(self) -> u32 {
        match self {
            Dtype::Bytes => 1,
            Dtype::U32 => 2,
            Dtype::U64 => 3,
            Dtype::F32 => 4,
            Dtype::Json => 5,
            Dtype::U8 => 6,
            Dtype::U16 => 7,
        }
    }

    /// The dtype for a stored tag, if the tag is known.
    pub const fn from_tag(tag: u32) -> Option<Dtype> {
        match tag {
            1 => Some(Dtype::Bytes),
            2 => Some(Dtype::U32),
            3 => Some(Dtype::U64),
            4 => Some(Dtype::F32),
            5 => Some(Dtype::Json),
            6 => Some(Dtype::U8),
            7 => Some(Dtype::U16),
            _ => None,
        }
    }

    /// The first format version with this dtype; an older file that names it is refused.
    pub const fn since(self) -> u32 {
        match self {
            Dtype::U8 | Dtype::U16 => 3,
            Dtype::Bytes | Dtype::U32 | Dtype::U64 | Dtype::F32 | Dtype::Json => 1,
        }
    }

    /// The size of one element; a section's byte length must be a multiple of it.
    pub const fn elem_size(self) -> u64 {
        match self {
            Dtype::Bytes | Dtype::Json | Dtype::U8 => 1,
            Dtype::U16 => 2,
            Dtype::U32 | Dtype::F32 => 4,
            Dtype::U64 => 8,
        }
    }

    /// A short lower-case name, as shown by `xmc inspect`.
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::Bytes => "bytes",
            Dtype::U32 => "u32",
            Dtype::U64 => "u64",
            Dtype::F32 => "f32",
            Dtype::Json => "json",
            Dtype::U8 => "u8",
            Dtype::U16 => "u16",
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Rounds `n` up to the next multiple of [`ALIGN`], or `None` on overflow.
pub const fn align_up(n: u64) -> Option<u64> {
    match n.checked_add(ALIGN - 1) {
        Some(v) => Some(v & !(ALIGN - 1)),
        None => None,
    }
}

/// The fixed fields of the header, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Bytes 0..8.
    pub magic: [u8; 8],
    /// Bytes 8..12.
    pub endian_mark: u32,
    /// Bytes 12..16.
    pub version: u32,
    /// Bytes 16..20.
    pub section_count: u32,
    /// Bytes 20..24, zero in version 1.
    pub flags: u32,
    /// Bytes 24..32.
    pub file_len: u64,
    /// Bytes 32..56, zero in version 1.
    pub reserved: [u8; 24],
    /// Bytes 56..60: CRC32 of the section table.
    pub table_crc: u32,
    /// Bytes 60..64: CRC32 of header bytes 0..60.
    pub header_crc: u32,
}

impl Header {
    /// Encodes the header, computing `header_crc` over the other fields.
    pub fn encode(section_count: u32, file_len: u64, table_crc: u32) -> [u8; HEADER_LEN as usize] {
        let mut b = [0u8; HEADER_LEN as usize];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&ENDIAN_MARK.to_le_bytes());
        b[12..16].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[16..20].copy_from_slice(&section_count.to_le_bytes());
        b[24..32].copy_from_slice(&file_len.to_le_bytes());
        b[56..60].copy_from_slice(&table_crc.to_le_bytes());
        let crc = crc32fast::hash(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes the header fields without judging them.
    pub fn decode(b: &[u8; HEADER_LEN as usize]) -> Header {
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&b[0..8]);
        let mut reserved = [0u8; 24];
        reserved.copy_from_slice(&b[32..56]);
        Header {
            magic,
            endian_mark: le_u32(b, 8),
            version: le_u32(b, 12),
            section_count: le_u32(b, 16),
            flags: le_u32(b, 20),
            file_len: le_u64(b, 24),
            reserved,
            table_crc: le_u32(b, 56),
            header_crc: le_u32(b, 60),
        }
    }
}

/// One section-table entry, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Bytes 0..32: the name, NUL-padded.
    pub name: [u8; MAX_NAME_LEN],
    /// Bytes 32..36: the [`Dtype`] tag.
    pub dtype_tag: u32,
    /// Bytes 36..40: CRC32 of the section's bytes.
    pub crc: u32,
    /// Bytes 40..48: the absolute file offset of the first byte.
    pub offset: u64,
    /// Bytes 48..56: the length in bytes, without padding.
    pub len: u64,
    /// Bytes 56..64, zero in version 1.
    pub reserved: u64,
}

impl Entry {
    /// Encodes the entry.
    pub fn encode(&self) -> [u8; ENTRY_LEN as usize] {
        let mut b = [0u8; ENTRY_LEN as usize];
        b[0..32].copy_from_slice(&self.name);
        b[32..36].copy_from_slice(&self.dtype_tag.to_le_bytes());
        b[36..40].copy_from_slice(&self.crc.to_le_bytes());
        b[40..48].copy_from_slice(&self.offset.to_le_bytes());
        b[48..56].copy_from_slice(&self.len.to_le_bytes());
        b[56..64].copy_from_slice(&self.reserved.to_le_bytes());
        b
    }

    /// Decodes an entry without judging it.
    pub fn decode(b: &[u8; ENTRY_LEN as usize]) -> Entry {
        let mut name = [0u8; MAX_NAME_LEN];
        name.copy_from_slice(&b[0..32]);
        Entry {
            name,
            dtype_tag: le_u32(b, 32),
            crc: le_u32(b, 36),
            offset: le_u64(b, 40),
            len: le_u64(b, 48),
            reserved: le_u64(b, 56),
        }
    }
}

/// Encodes the footer: the CRC32 of header and table, four zero bytes, then [`FOOTER_MAGIC`].
pub fn encode_footer(meta_crc: u32) -> [u8; FOOTER_LEN as usize] {
    let mut b = [0u8; FOOTER_LEN as usize];
    b[0..4].copy_from_slice(&meta_crc.to_le_bytes());
    b[8..16].copy_from_slice(&FOOTER_MAGIC);
    b
}

/// Why a name cannot be a section name, or `None` if it can.
pub fn name_problem(name: &[u8]) -> Option<&'static str> {
    if name.is_empty() {
        Some("the name is empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("the name is longer than 32 bytes")
    } else if !name.iter().all(|b| b.is_ascii_graphic()) {
        Some("the name has a byte that is not printable ASCII (0x21..=0x7e)")
    } else {
        None
    }
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_crc_covers_fields() {
        let b = Header::encode(3, 4096, 0xdead_beef);
        let h = Header::decode(&b);
        assert_eq!(h.magic, MAGIC);
        assert_eq!(h.endian_mark, ENDIAN_MARK);
        assert_eq!(h.version, FORMAT_VERSION);
        assert_eq!(
            (h.section_count, h.file_len, h.table_crc),
            (3, 4096, 0xdead_beef)
        );
        assert_eq!(h.header_crc, crc32fast::hash(&b[0..60]));
        assert_eq!(&b[8..12], &[4, 3, 2, 1]);
    }

    #[test]
    fn entry_round_trips() {
        let mut name = [0u8; MAX_NAME_LEN];
        name[..3].copy_from_slice(b"abc");
        let e = Entry {
            name,
            dtype_tag: 4,
            crc: 7,
            offset: 128,
            len: 12,
            reserved: 0,
        };
        assert_eq!(Entry::decode(&e.encode()), e);
    }

    #[test]
    fn dtype_tags_round_trip_and_unknown_tags_are_none() {
        for d in [
            Dtype::Bytes,
            Dtype::U32,
            Dtype::U64,
            Dtype::F32,
            Dtype::Json,
            Dtype::U8,
            Dtype::U16,
        ] {
            assert_eq!(Dtype::from_tag(d.tag()), Some(d));
        }
        assert_eq!(Dtype::from_tag(0), None);
        assert_eq!(Dtype::from_tag(8), None);
    }

    #[test]
    fn names_are_checked() {
        assert!(name_problem(b"tree.0.weights").is_none());
        assert!(name_problem(b"").is_some());
        assert!(name_problem(b"has space").is_some());
        assert!(name_problem(&[b'a'; 33]).is_some());
        assert!(name_problem(&[b'a'; 32]).is_none());
    }

    #[test]
    fn align_up_rounds_and_reports_overflow() {
        assert_eq!(align_up(0), Some(0));
        assert_eq!(align_up(1), Some(64));
        assert_eq!(align_up(64), Some(64));
        assert_eq!(align_up(u64::MAX), None);
    }
}
