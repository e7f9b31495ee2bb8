//! A shard's finished classifiers, kept on disk until the shard file is written.
//!
//! A shard trains beside the data and its largest node's problem; holding its share of the model
//! too would add all of it to the peak. So each node's weights go to an unlinked temporary file
//! as soon as the node is trained (biases and lengths stay in memory), and are read back in the
//! shard's order once the data is gone. The file has no name, so a shard that fails or is killed
//! leaves nothing behind.

use crate::linear::LinearColumn;
use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Mutex;

/// The file of a shard's spilled weights.
pub(super) struct Spill {
    /// The writer and the bytes written so far.
    file: Mutex<(BufWriter<File>, u64)>,
}

/// One node's classifiers: their weights' place in the spill, and what stays in memory.
pub(super) struct SpilledNode {
    /// The byte offset of the node's indices (all its classifiers' in order, then their values).
    at: u64,
    /// Each classifier's bias.
    pub bias: Vec<f32>,
    /// Each classifier's number of weights.
    pub lens: Vec<u64>,
}

impl SpilledNode {
    fn weights(&self) -> usize {
        self.lens.iter().sum::<u64>() as usize
    }
}

fn poisoned<T>(_: T) -> io::Error {
    io::Error::other("a thread failed while writing the spill file")
}

impl Spill {
    /// An empty spill in an unlinked file in `dir`.
    pub fn new_in(dir: &Path) -> io::Result<Spill> {
        let file = tempfile::tempfile_in(dir)?;
        Ok(Spill {
            file: Mutex::new((BufWriter::with_capacity(1 << 20, file), 0)),
        })
    }

    /// Writes the weights of one node's `columns` and keeps their biases and lengths.
    pub fn put(&self, columns: Vec<LinearColumn>) -> io::Result<SpilledNode> {
        let mut guard = self.file.lock().map_err(poisoned)?;
        let (out, len) = &mut *guard;
        let at = *len;
        for c in &columns {
            out.write_all(bytemuck::cast_slice(&c.indices))?;
        }
        for c in &columns {
            out.write_all(bytemuck::cast_slice(&c.values))?;
        }
        let lens: Vec<u64> = columns.iter().map(|c| c.indices.len() as u64).collect();
        *len += 8 * lens.iter().sum::<u64>();
        Ok(SpilledNode {
            at,
            bias: columns.iter().map(|c| c.bias).collect(),
            lens,
        })
    }

    /// The weights of `nodes`, in that order: their indices and their values.
    pub fn read(&self, nodes: &[SpilledNode]) -> io::Result<(Vec<u32>, Vec<f32>)> {
        let mut guard = self.file.lock().map_err(poisoned)?;
        let (out, _) = &mut *guard;
        out.flush()?;
        let file = out.get_mut();
        let total = nodes.iter().map(SpilledNode::weights).sum();
        let (mut indices, mut values) = (vec![0u32; total], vec![0f32; total]);
        let mut k = 0;
        for node in nodes {
            let m = node.weights();
            file.seek(SeekFrom::Start(node.at))?;
            file.read_exact(bytemuck::cast_slice_mut(&mut indices[k..k + m]))?;
            file.read_exact(bytemuck::cast_slice_mut(&mut values[k..k + m]))?;
            k += m;
        }
        Ok((indices, values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(indices: &[u32], values: &[f32], bias: f32) -> LinearColumn {
        LinearColumn {
            indices: indices.to_vec(),
            values: values.to_vec(),
            bias,
            ..LinearColumn::default()
        }
    }

    /// Nodes spilled in the order threads finish them read back in the shard's order, each
    /// classifier's weights whole, and an empty one in its place.
    #[test]
    fn nodes_read_back_in_the_order_asked() {
        let dir = tempfile::tempdir().unwrap();
        let spill = Spill::new_in(dir.path()).unwrap();
        let late = spill
            .put(vec![column(&[7], &[0.5], 1.0), column(&[], &[], -1.0)])
            .unwrap();
        let early = spill
            .put(vec![column(&[1, 4, 9], &[2.0, -3.0, 0.25], 0.5)])
            .unwrap();
        assert_eq!(
            (early.bias.clone(), early.lens.clone()),
            (vec![0.5], vec![3])
        );
        assert_eq!(late.lens, vec![1, 0]);
        let (indices, values) = spill.read(&[early, late]).unwrap();
        assert_eq!(indices, vec![1, 4, 9, 7]);
        assert_eq!(values, vec![2.0, -3.0, 0.25, 0.5]);
        // The spill has no name: the directory stays empty.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
