//! A shard file as the merge reads it: its classifiers borrowed from the file's memory map.

use super::{
    BIAS, COLUMNS, INDICES, SHARD, SHARD_FORMAT, STARTS, ShardError, ShardMeta, VALUES, file_err,
    open_verified,
};
use crate::bundle::{FormatError, Section};
use crate::tree::train::TrainedColumn;
use std::path::Path;

/// A shard file as the merge reads it: its classifiers stay in the file's memory map.
pub struct ShardFile {
    /// The JSON section.
    pub meta: ShardMeta,
    /// Per classifier, (tree, node, output).
    pub ids: Vec<[u32; 3]>,
    bias: Section<f32>,
    starts: Section<u64>,
    indices: Section<u32>,
    values: Section<f32>,
}

/// One classifier of a [`ShardFile`], borrowed from its memory map.
pub struct ColumnRef<'a> {
    bias: f32,
    indices: &'a [u32],
    values: &'a [f32],
}

impl TrainedColumn for ColumnRef<'_> {
    fn bias(&self) -> f32 {
        self.bias
    }

    fn weights(&self) -> (&[u32], &[f32]) {
        (self.indices, self.values)
    }
}

impl ShardFile {
    /// Reads a shard file, checking its checksums and its structure (not yet against a plan).
    pub fn read(path: &Path) -> Result<ShardFile, ShardError> {
        let bad = |reason: String| file_err(path, format!("not a usable shard file: {reason}"));
        let b = open_verified(path).map_err(|e| bad(e.to_string()))?;
        let meta: ShardMeta = b.json(SHARD).map_err(|e| bad(e.to_string()))?;
        if meta.format != SHARD_FORMAT {
            return Err(bad(format!(
                "format {:?}, expected {SHARD_FORMAT:?}",
                meta.format
            )));
        }
        let err = |e: FormatError| bad(e.to_string());
        let ids = b.u32s(COLUMNS).map_err(err)?;
        let bias = b.f32s(BIAS).map_err(err)?;
        let starts = b.u64s(STARTS).map_err(err)?;
        let indices = b.u32s(INDICES).map_err(err)?;
        let values = b.f32s(VALUES).map_err(err)?;
        let n = bias.as_slice().len();
        let st = starts.as_slice();
        if ids.as_slice().len() != 3 * n
            || st.len() != n + 1
            || st.first() != Some(&0)
            || st.windows(2).any(|w| w[0] > w[1])
            || st[n] != indices.as_slice().len() as u64
            || indices.as_slice().len() != values.as_slice().len()
        {
            return Err(bad("its column arrays do not fit together".into()));
        }
        let ids = ids
            .as_slice()
            .chunks_exact(3)
            .map(|c| [c[0], c[1], c[2]])
            .collect();
        Ok(ShardFile {
            meta,
            ids,
            bias,
            starts,
            indices,
            values,
        })
    }

    /// Classifier `c` (below `ids.len()`).
    pub fn column(&self, c: usize) -> ColumnRef<'_> {
        let st = self.starts.as_slice();
        let (a, z) = (st[c] as usize, st[c + 1] as usize);
        ColumnRef {
            bias: self.bias.as_slice()[c],
            indices: &self.indices.as_slice()[a..z],
            values: &self.values.as_slice()[a..z],
        }
    }
}
