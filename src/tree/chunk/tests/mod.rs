//! Tests of the chunk rooms, one file per room, with the fixtures they share.

use super::*;

mod builder;
mod entries;
mod score;
mod validate;

/// Two nodes, each built with its (index, layout) from `layouts`. Node 0 has two outputs:
/// output 0 uses features 1 and 5, output 1 uses 5 and 7. Node 1 has three outputs, output 1
/// empty.
fn nodes_as(layouts: [(IndexChoice, RowChoice); 2]) -> ChunksBuilder {
    let node0 = [(&[1u32, 5][..], &[1.0f32, 2.0][..]), (&[5, 7], &[3.0, 4.0])];
    let node1 = [(&[0u32][..], &[0.5f32][..]), (&[], &[]), (&[9], &[-1.0])];
    let mut b = ChunksBuilder::new();
    let [(i0, r0), (i1, r1)] = layouts;
    b.push_node_as(node0, i0, r0).unwrap();
    b.push_node_as(node1, i1, r1).unwrap();
    b
}

/// Node `node`'s scores, added into a zeroed accumulator of `len` slots, by one of four
/// lookups: 0 the scan of `dense`, 1 the search of the sorted query, 2 [`Chunks::score`]'s own
/// choice, 3 the node's index (its rank blocks, or its hash table when it has none). `q` is
/// the query's ids, values and dense form.
fn score_by(
    c: &Chunks<&[u32], &[f32], OutSlice<'_>>,
    node: usize,
    how: usize,
    q: (&[u32], &[f32], &[f32]),
    len: usize,
) -> Vec<f32> {
    let (q_idx, q_val, dense) = q;
    let mut acc = vec![0f32; len];
    match how {
        0 => c.score_scan(node, dense, &mut acc),
        1 => c.score_search(node, q_idx, q_val, &mut acc),
        2 => c.score(node, q_idx, q_val, dense, &mut acc),
        _ if c.rank_blocks(node).is_empty() => c.score_hash(node, q_idx, q_val, &mut acc),
        _ => c.score_rank(node, q_idx, q_val, &mut acc),
    }
    acc
}

/// The two nodes with hash tables, storing entries.
fn two_nodes() -> ChunksBuilder {
    nodes_as([(IndexChoice::Hash, RowChoice::Entries); 2])
}

/// The same two nodes, node 0 on rows and a rank index, node 1 on entries and a hash table.
fn row_nodes() -> ChunksBuilder {
    nodes_as([
        (IndexChoice::Rank, RowChoice::Rows),
        (IndexChoice::Hash, RowChoice::Entries),
    ])
}

/// Sparse vectors: each output's (feature ids, weights).
type Outputs = Vec<(Vec<u32>, Vec<f32>)>;

/// A random node of up to 5 outputs over `d` features, and a random query.
fn random_node_and_query(
    rng: &mut rand_chacha::ChaCha8Rng,
    d: u32,
) -> (Outputs, Vec<u32>, Vec<f32>) {
    use rand::RngExt;
    let outputs: Outputs = (0..rng.random_range(1..6))
        .map(|_| {
            let mut idx: Vec<u32> = (0..rng.random_range(0..80))
                .map(|_| rng.random_range(0..d))
                .collect();
            idx.sort_unstable();
            idx.dedup();
            let val = idx.iter().map(|_| rng.random_range(-1.0f32..1.0)).collect();
            (idx, val)
        })
        .collect();
    let mut q_idx: Vec<u32> = (0..rng.random_range(0..40))
        .map(|_| rng.random_range(0..d))
        .collect();
    q_idx.sort_unstable();
    q_idx.dedup();
    let q_val: Vec<f32> = q_idx
        .iter()
        .map(|_| rng.random_range(0.1f32..1.0))
        .collect();
    (outputs, q_idx, q_val)
}

/// One node on a rank index, with features 1, 4 and 100 (two blocks).
fn rank_node() -> ChunksBuilder {
    let mut b = ChunksBuilder::new();
    b.push_node_with(
        [(&[1u32, 4, 100][..], &[1.0f32, 2.0, 3.0][..])],
        IndexChoice::Rank,
    )
    .unwrap();
    b
}
