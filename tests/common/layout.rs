//! The bundle's documented byte layout (the `xmc::bundle` module docs), for tests that damage or
//! forge bundles byte by byte.

/// The header's length, where the section table starts.
pub const HEADER: usize = 64;
/// One section table entry's length.
pub const ENTRY: usize = 64;
/// The footer's length.
pub const FOOTER: usize = 16;

/// The section count the header records.
pub fn count(b: &[u8]) -> usize {
    u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize
}

/// The byte offset of table entry `i`.
pub fn entry_at(i: usize) -> usize {
    HEADER + i * ENTRY
}

/// Writes a little-endian `u64` at `at`.
pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Reads a little-endian `u64` at `at`.
pub fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Recomputes the table CRC, header CRC, file length and footer CRC after an edit, as the writer
/// would, so that the check under test, not a checksum, is what meets the edit. A table that
/// would run past the footer (a forged count) is left as it is, and only the header resealed.
pub fn reseal(b: &mut [u8]) {
    let len = b.len() as u64;
    put_u64(b, 24, len);
    let table_end = count(b).saturating_mul(ENTRY).saturating_add(HEADER);
    let table_fits = table_end.saturating_add(FOOTER) <= b.len();
    if table_fits {
        let table_crc = crc32fast::hash(&b[HEADER..table_end]);
        b[56..60].copy_from_slice(&table_crc.to_le_bytes());
    }
    let header_crc = crc32fast::hash(&b[..60]);
    b[60..64].copy_from_slice(&header_crc.to_le_bytes());
    if table_fits {
        let meta_crc = crc32fast::hash(&b[..table_end]);
        let f = b.len() - FOOTER;
        b[f..f + 4].copy_from_slice(&meta_crc.to_le_bytes());
    }
}
