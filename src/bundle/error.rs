//! The one error type of the bundle container.
//!
//! Every check the reader or writer makes has its own variant, and every message says what is wrong
//! and where (the section name, the byte offsets), so an operator can tell a truncated copy from a
//! bundle made by a newer xmc without a hex editor.

use std::path::PathBuf;

use super::format::Dtype;

/// What went wrong while reading or writing a bundle.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The operating system failed to open, read, map, write, sync or rename a file.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The file is too short to hold even an empty bundle.
    #[error(
        "file is {len} bytes, shorter than the smallest bundle ({min} bytes): it is truncated or not an xmc bundle"
    )]
    TooShort {
        /// The file's length.
        len: u64,
        /// The smallest valid length.
        min: u64,
    },

    /// The first eight bytes are not the bundle magic.
    #[error(
        "not an xmc bundle: the first 8 bytes are {found:02x?}, expected {expected:02x?}{hint}"
    )]
    BadMagic {
        /// The bytes found.
        found: [u8; 8],
        /// The bytes expected.
        expected: [u8; 8],
        /// Extra advice when the bytes look like a text-mode transfer mangled them.
        hint: &'static str,
    },

    /// The endianness mark is not `0x01020304` stored little-endian.
    #[error("bad endianness mark 0x{found:08x} at byte 8 (expected 0x01020304){hint}")]
    BadEndianMark {
        /// The mark as read little-endian.
        found: u32,
        /// Extra advice when the mark is byte-swapped.
        hint: &'static str,
    },

    /// The bundle's format version is outside the range this build reads.
    #[error("this bundle is format version {found}; this xmc reads versions {min}-{max}: {advice}")]
    UnsupportedVersion {
        /// The version in the file.
        found: u32,
        /// The oldest version this build reads.
        min: u32,
        /// The newest version this build reads.
        max: u32,
        /// What to do about it.
        advice: &'static str,
    },

    /// This machine is big-endian, and sections are read in place as little-endian numbers.
    #[error("xmc bundles are little-endian and are read in place; this machine is big-endian")]
    BigEndianHost,

    /// The header checksum does not match the header bytes.
    #[error(
        "header checksum mismatch (stored 0x{stored:08x}, computed 0x{computed:08x} over bytes 0..60): the header is corrupt"
    )]
    HeaderChecksum {
        /// The checksum stored at bytes 60..64.
        stored: u32,
        /// The checksum of bytes 0..60.
        computed: u32,
    },

    /// A field that version 1 requires to be zero is not.
    #[error(
        "reserved field {field} is not zero: the file is corrupt or written by an incompatible xmc"
    )]
    ReservedNotZero {
        /// Which field, with its location.
        field: String,
    },

    /// The length recorded in the header differs from the real file length.
    #[error(
        "the header says the file is {recorded} bytes but it is {actual}: it was truncated or appended to"
    )]
    LengthMismatch {
        /// The length in the header.
        recorded: u64,
        /// The actual length.
        actual: u64,
    },

    /// The section table does not fit between the header and the footer.
    #[error(
        "the section table of {count} entries ends at byte {table_end}, past the footer at byte {footer_start}"
    )]
    TableOutOfBounds {
        /// The section count in the header.
        count: u32,
        /// Where the table would end.
        table_end: u64,
        /// Where the footer starts.
        footer_start: u64,
    },

    /// The section table checksum in the header does not match the table bytes.
    #[error(
        "section table checksum mismatch (stored 0x{stored:08x}, computed 0x{computed:08x} over bytes 64..{table_end}): the table is corrupt"
    )]
    TableChecksum {
        /// The checksum stored in the header.
        stored: u32,
        /// The checksum of the table bytes.
        computed: u32,
        /// Where the table ends.
        table_end: u64,
    },

    /// The last eight bytes are not the footer magic.
    #[error("bad footer magic at byte {offset}: the file is truncated or has trailing bytes")]
    BadFooterMagic {
        /// Where the footer magic should be.
        offset: u64,
    },

    /// The footer checksum does not match the header and table bytes.
    #[error(
        "footer checksum mismatch (stored 0x{stored:08x}, computed 0x{computed:08x} over header and table): the file is corrupt"
    )]
    FooterChecksum {
        /// The checksum stored in the footer.
        stored: u32,
        /// The checksum of header and table.
        computed: u32,
    },

    /// A section name is empty, too long or not printable ASCII.
    #[error("section {index} has an invalid name {name:?}: {reason}")]
    BadName {
        /// The section's position in the table (or in the writer).
        index: usize,
        /// The name, lossily decoded.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// Two sections share a name.
    #[error("two sections are named {name:?} (entries {first} and {second})")]
    DuplicateName {
        /// The shared name.
        name: String,
        /// The earlier entry.
        first: usize,
        /// The later entry.
        second: usize,
    },

    /// A section's dtype tag is unknown.
    #[error("section {name:?} has unknown dtype tag {tag}: it was written by an incompatible xmc")]
    UnknownDtype {
        /// The section name.
        name: String,
        /// The tag found.
        tag: u32,
    },

    /// A section does not lie between the section table and the footer.
    #[error(
        "section {name:?} spans bytes {offset}..{end}, outside the data area {data_start}..{data_end}"
    )]
    SectionOutOfBounds {
        /// The section name.
        name: String,
        /// Its start.
        offset: u64,
        /// Its end (saturated on overflow).
        end: u64,
        /// Where the data area starts.
        data_start: u64,
        /// Where the data area ends (the footer).
        data_end: u64,
    },

    /// A section does not start on a 64-byte boundary.
    #[error("section {name:?} starts at byte {offset}, which is not a multiple of 64")]
    Misaligned {
        /// The section name.
        name: String,
        /// Its start.
        offset: u64,
    },

    /// Two sections share bytes.
    #[error(
        "sections {first:?} (bytes {first_start}..{first_end}) and {second:?} (from byte {second_start}) overlap"
    )]
    Overlap {
        /// The section that starts first.
        first: String,
        /// Its start.
        first_start: u64,
        /// Its end.
        first_end: u64,
        /// The section that starts inside it.
        second: String,
        /// Its start.
        second_start: u64,
    },

    /// A section's byte length is not a multiple of its element size.
    #[error("section {name:?} is {len} bytes, not a multiple of the {size}-byte {dtype} element")]
    LengthNotMultiple {
        /// The section name.
        name: String,
        /// Its dtype.
        dtype: Dtype,
        /// Its byte length.
        len: u64,
        /// The element size.
        size: u64,
    },

    /// A section's bytes do not match the checksum in the table.
    #[error(
        "section {name:?} (bytes {offset}..{end}) checksum mismatch (stored 0x{stored:08x}, computed 0x{computed:08x}): the section is corrupt"
    )]
    SectionChecksum {
        /// The section name.
        name: String,
        /// Its start.
        offset: u64,
        /// Its end.
        end: u64,
        /// The checksum in the table.
        stored: u32,
        /// The checksum of the bytes.
        computed: u32,
    },

    /// A padding byte between sections is not zero.
    #[error("padding byte at offset {offset} is 0x{value:02x}, not zero: the file is corrupt")]
    PaddingNotZero {
        /// The byte's offset.
        offset: u64,
        /// The byte's value.
        value: u8,
    },

    /// No section has the requested name.
    #[error("the bundle has no section named {name:?}")]
    NoSuchSection {
        /// The requested name.
        name: String,
    },

    /// A section was read as a dtype other than the one it was written with.
    #[error("section {name:?} holds {found}, but was read as {expected}")]
    WrongDtype {
        /// The section name.
        name: String,
        /// The dtype asked for.
        expected: Dtype,
        /// The dtype stored.
        found: Dtype,
    },

    /// A JSON section could not be encoded or decoded.
    #[error("JSON section {name:?}: {source}")]
    Json {
        /// The section name.
        name: String,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },

    /// The bundle would be too large to describe (more than `u32::MAX` sections or `u64::MAX` bytes).
    #[error("the bundle is too large to write: {what}")]
    TooLarge {
        /// What overflowed.
        what: &'static str,
    },
}

impl FormatError {
    /// Wraps an I/O error with the path it concerns.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> FormatError {
        FormatError::Io {
            path: path.into(),
            source,
        }
    }
}
