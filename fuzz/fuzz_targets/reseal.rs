//! Shared by the fuzz targets: makes a mutated bundle's container checksums consistent again,
//! so that mutations reach the checks behind them.

/// A copy of `data` with the file length, table CRC, header CRC and footer CRC made consistent
/// with the rest of the bytes, following the layout in the `xmc::bundle` module docs.
pub fn reseal(data: &[u8]) -> Option<Vec<u8>> {
    let mut b = data.to_vec();
    if b.len() < 80 {
        return None;
    }
    let count = u32::from_le_bytes(b[16..20].try_into().ok()?) as usize;
    let table_end = count.checked_mul(64)?.checked_add(64)?;
    if table_end > b.len() - 16 {
        return None;
    }
    let len = b.len() as u64;
    b[24..32].copy_from_slice(&len.to_le_bytes());
    let table_crc = crc32fast::hash(&b[64..table_end]);
    b[56..60].copy_from_slice(&table_crc.to_le_bytes());
    let header_crc = crc32fast::hash(&b[..60]);
    b[60..64].copy_from_slice(&header_crc.to_le_bytes());
    let meta_crc = crc32fast::hash(&b[..table_end]);
    let footer = b.len() - 16;
    b[footer..footer + 4].copy_from_slice(&meta_crc.to_le_bytes());
    Some(b)
}
