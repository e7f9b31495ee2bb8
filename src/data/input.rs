//! Opening data files: gzip is recognised by its magic bytes, never by the file extension.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use flate2::bufread::MultiGzDecoder;

use super::DataError;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Wraps `reader` in a gzip decoder when its first two bytes are the gzip magic.
pub(crate) fn decoded<'a, R: Read + 'a>(mut reader: R) -> std::io::Result<Box<dyn Read + 'a>> {
    let mut head = [0u8; 2];
    let mut got = 0;
    while got < head.len() {
        match reader.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let is_gzip = got == 2 && head == GZIP_MAGIC;
    let stream = std::io::Cursor::new(head[..got].to_vec()).chain(reader);
    Ok(wrap(BufReader::with_capacity(1 << 16, stream), is_gzip))
}

fn wrap<'a, B: BufRead + 'a>(reader: B, is_gzip: bool) -> Box<dyn Read + 'a> {
    if is_gzip {
        Box::new(MultiGzDecoder::new(reader))
    } else {
        Box::new(reader)
    }
}

/// Opens `path` for reading, decompressing gzip transparently.
pub(crate) fn open(path: &Path) -> Result<Box<dyn Read>, DataError> {
    let io = |error| DataError::Io {
        file: display_name(path),
        error,
    };
    let file = File::open(path).map_err(io)?;
    decoded(file).map_err(io)
}

/// The name used for `path` in error messages.
pub(crate) fn display_name(path: &Path) -> String {
    path.display().to_string()
}
