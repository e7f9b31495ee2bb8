//! The term index: a hash table from a term's bytes to its feature id, built by the fit, stored
//! in the bundle beside the fst vocabulary and read in place.
//!
//! The fst is the vocabulary's compact, canonical form, but a lookup in it decodes one node per
//! byte of the term, scattered over a structure of megabytes: on a large vocabulary that is most of
//! a text query's cost. The index finds a term with a probe of an open-addressing table and one
//! read of a record that holds the term's id and bytes side by side, usually two cache misses
//! (docs/decisions/0027-text-term-index.md).
//!
//! # Layout
//!
//! - `text.index.terms` (bytes): one record for each term, in feature id order: the id (u32,
//!   little-endian), the term's length in bytes (u32, little-endian), then its bytes.
//! - `text.index.slots` (u32): two hash tables, one after the other. The *hot* table holds the
//!   first `min(n, 4096)` feature ids, the most frequent terms (the fit numbers terms by falling
//!   document frequency), in a few dozen kilobytes that stay in the cache; the *cold* table holds
//!   the others. A table of `S` slots is `2 × S` words, `S` a power of two with at most three
//!   terms in four slots: slot `i` is the pair `[tag, offset]` at words `2i` and `2i + 1`, the
//!   offset of a record in `text.index.terms`, or `u32::MAX` for an empty slot. A term with hash
//!   `h` (XXH3-64 of its bytes, seed 0) is in the first empty slot from `h mod S` on (linear
//!   probing), with `tag = h >> 32`. A lookup probes the hot table, then the cold one.
//!
//! The fit inserts the terms in feature id order, so the same vocabulary gives the same bytes.
//! Opening checks the lengths (O(1)); [`TermIndexView::verify`] checks every record and slot
//! (O(vocabulary)). A lookup reads only in-bounds bytes and gives up after `S` probes, so a
//! damaged index that passed the structural open can answer wrongly but never panic.

use crate::bundle::{Bundle, FormatError, Section};

/// The slot pairs of the hash table.
pub const SLOTS_SECTION: &str = "text.index.slots";
/// The term records, in feature id order.
pub const TERMS_SECTION: &str = "text.index.terms";

/// The offset of an empty slot.
const EMPTY: u32 = u32::MAX;

/// Not an offset (every record offset is below `terms.len()`, which is below this): in a batch,
/// marks a term whose cold home slot holds another term, so that the lookup probes on.
const PROBE: u32 = u32::MAX - 1;

/// The bytes of a record before its term: the id and the length.
const HEAD: usize = 8;

/// The hash of a term, as stored: XXH3-64 with seed 0 (a specified function, so a bundle's table
/// stays valid under any build of xmc).
#[inline]
pub(crate) fn term_hash(term: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(term)
}

/// The number of terms in the hot table, at most: part of the format.
const HOT: usize = 4096;

/// A table's slot count for `n` terms: a power of two, at least 4n/3 and at least 8 (`None` past
/// `usize`).
fn slot_count(n: usize) -> Option<usize> {
    let count = n.checked_add(n.div_ceil(3))?.checked_next_power_of_two()?;
    Some(count.max(8))
}

/// The hot and the cold table's slot counts for `n` terms, and the words of both.
fn slot_counts(n: usize) -> Option<(usize, usize, usize)> {
    let hot = n.min(HOT);
    let (hot, cold) = (slot_count(hot)?, slot_count(n - hot)?);
    Some((hot, cold, hot.checked_add(cold)?.checked_mul(2)?))
}

/// Puts `off` into the first empty slot of `table` from `h`'s home on; false if it is full.
fn insert(table: &mut [u32], h: u64, off: u32) -> bool {
    let size = table.len() / 2;
    let mask = size.wrapping_sub(1);
    let mut i = (h as usize) & mask;
    for _ in 0..size {
        match table.get_mut(2 * i..2 * i + 2) {
            Some([tag, slot]) if *slot == EMPTY => {
                *tag = (h >> 32) as u32;
                *slot = off;
                return true;
            }
            Some(_) => i = (i + 1) & mask,
            None => return false,
        }
    }
    false
}

/// The table's arrays as the fit builds them and the writer stores them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TermIndex {
    /// `text.index.slots`.
    pub slots: Vec<u32>,
    /// `text.index.terms`.
    pub terms: Vec<u8>,
}

impl TermIndex {
    /// The index of `terms`, the term of feature id `i` being the `i`th; the terms are distinct
    /// (a vocabulary's). `None` when the records would not fit 32-bit offsets.
    pub(crate) fn build<'a>(terms: impl ExactSizeIterator<Item = &'a [u8]>) -> Option<TermIndex> {
        let (hot, _, words) = slot_counts(terms.len())?;
        let mut slots = vec![0u32; words];
        for pair in slots.chunks_exact_mut(2) {
            if let [_, off] = pair {
                *off = EMPTY;
            }
        }
        let (hot_table, cold_table) = slots.split_at_mut(2 * hot);
        let mut records = Vec::new();
        for (id, term) in terms.enumerate() {
            let off = u32::try_from(records.len()).ok().filter(|&o| o < PROBE)?;
            records.extend_from_slice(&u32::try_from(id).ok()?.to_le_bytes());
            records.extend_from_slice(&u32::try_from(term.len()).ok()?.to_le_bytes());
            records.extend_from_slice(term);
            let table = if id < HOT {
                &mut *hot_table
            } else {
                &mut *cold_table
            };
            // A quarter of the slots at least stay empty, so the insert succeeds.
            if !insert(table, term_hash(term), off) {
                return None;
            }
        }
        u32::try_from(records.len()).ok().filter(|&l| l < PROBE)?;
        Some(TermIndex {
            slots,
            terms: records,
        })
    }
}

/// Why a term index cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TermIndexError {
    /// The sections' lengths do not fit together (found by the structural open).
    #[error("text.index: {0}")]
    Shape(String),
    /// A record or a slot is damaged, or the index and the vocabulary disagree (found by the full
    /// check).
    #[error("text.index: {0}")]
    Content(String),
    /// A section is missing or of the wrong type.
    #[error(transparent)]
    Format(#[from] FormatError),
}

/// The term index of a bundle, read in place.
#[derive(Clone)]
pub struct TermIndexView {
    slots: Section<u32>,
    terms: Section<u8>,
    /// The words of `slots` that hold the hot table.
    hot_words: usize,
}

impl TermIndexView {
    /// The bundle's index, `None` for a bundle written before there was one (it has neither
    /// section). Checks the shapes only, in O(1), for `n_terms` terms.
    pub(crate) fn open(
        bundle: &Bundle,
        n_terms: usize,
    ) -> Result<Option<TermIndexView>, TermIndexError> {
        let has = |name| bundle.section(name).is_some();
        match (has(SLOTS_SECTION), has(TERMS_SECTION)) {
            (false, false) => Ok(None),
            (true, true) => Ok(Some(TermIndexView::new(
                bundle.u32s(SLOTS_SECTION)?,
                bundle.bytes(TERMS_SECTION)?,
                n_terms,
            )?)),
            _ => Err(TermIndexError::Shape(format!(
                "the bundle has one of {SLOTS_SECTION} and {TERMS_SECTION} without the other"
            ))),
        }
    }

    /// The view over the two arrays, with their shapes checked for `n_terms` terms.
    pub(crate) fn new(
        slots: Section<u32>,
        terms: Section<u8>,
        n_terms: usize,
    ) -> Result<TermIndexView, TermIndexError> {
        let Some((hot, _, _)) = slot_counts(n_terms).filter(|c| slots.len() == c.2) else {
            return Err(TermIndexError::Shape(format!(
                "{SLOTS_SECTION} holds {} words, not the {} of {n_terms} terms",
                slots.len(),
                slot_counts(n_terms).map_or("(too many)".into(), |c| c.2.to_string())
            )));
        };
        let few = terms.len() < HEAD.saturating_mul(n_terms);
        if few || terms.len() >= PROBE as usize {
            return Err(TermIndexError::Shape(format!(
                "{TERMS_SECTION} holds {} bytes, too {} for {n_terms} terms",
                terms.len(),
                if few { "few" } else { "many" }
            )));
        }
        Ok(TermIndexView {
            slots,
            terms,
            hot_words: 2 * hot,
        })
    }

    /// The table as plain slices, for a run of lookups.
    #[inline]
    pub(crate) fn tables(&self) -> Tables<'_> {
        let (hot, cold) = self.slots.split_at(self.hot_words.min(self.slots.len()));
        Tables {
            hot,
            cold,
            terms: &self.terms,
        }
    }

    /// The full check of the index itself, O(vocabulary), for `n` terms: the records tile
    /// `text.index.terms` and hold every id below `n` once, exactly `n` slots are full, and each
    /// record is found by looking up its own term (so every full slot leads to its own record).
    /// [`TermIndexView::check_term`] then ties it to the vocabulary, term by term.
    pub(crate) fn verify(&self, n: usize) -> Result<(), TermIndexError> {
        let t = self.tables();
        let bad = |what: String| Err(TermIndexError::Content(what));
        let mut seen = vec![false; n];
        let mut off = 0usize;
        let mut records = 0usize;
        while off < t.terms.len() {
            let Some((id, term)) = t.record(off) else {
                return bad(format!(
                    "{TERMS_SECTION}: the record at byte {off} is cut short"
                ));
            };
            match seen.get_mut(id as usize) {
                Some(s) if !*s => *s = true,
                _ => {
                    return bad(format!(
                        "{TERMS_SECTION}: the record at byte {off} has id {id}, out of range or \
                         seen before"
                    ));
                }
            }
            if t.get(term) != Some(id) {
                return bad(format!(
                    "term {id} ({:?}) is not found at its own id",
                    String::from_utf8_lossy(term)
                ));
            }
            off += HEAD + term.len();
            records += 1;
        }
        let full = (t.hot.chunks_exact(2).chain(t.cold.chunks_exact(2)))
            .filter(|p| p.get(1) != Some(&EMPTY))
            .count();
        if records != n || full != n {
            return bad(format!(
                "{records} records and {full} full slots for {n} terms"
            ));
        }
        Ok(())
    }

    /// The rest of the full check, for each `(term, id)` of the vocabulary: the index must find
    /// `term` at `id`, so that, with [`TermIndexView::verify`], it holds the vocabulary's very
    /// terms.
    pub(crate) fn check_term(&self, term: &[u8], id: u64) -> Result<(), TermIndexError> {
        if self.tables().get(term).map(u64::from) == Some(id) {
            return Ok(());
        }
        Err(TermIndexError::Content(format!(
            "the vocabulary maps {:?} to {id}, the index does not",
            String::from_utf8_lossy(term)
        )))
    }
}

/// The terms of one text, looked up together ([`Tables::get_batch`]). Once its buffers have
/// grown to a text's size, a text of that size allocates nothing.
#[derive(Clone, Debug, Default)]
pub(crate) struct Batch {
    /// The terms' bytes, one after the other.
    keys: Vec<u8>,
    /// Each term's byte range in `keys`.
    spans: Vec<(usize, usize)>,
    /// Each term's hash and number, sorted by hash.
    order: Vec<(u64, u32)>,
    /// For each distinct term, in that order: its hash, its first number, how many times it
    /// occurs, and where the lookup stands.
    distinct: Vec<Distinct>,
}

/// A distinct term of a [`Batch`].
#[derive(Clone, Copy, Debug)]
struct Distinct {
    hash: u64,
    first: u32,
    count: u32,
    /// Its id, once found in the hot table.
    id: Option<u32>,
    /// Its home slot's offset in the cold table, `PROBE` if another term is there.
    off: u32,
}

impl Batch {
    /// Empties the batch.
    pub(crate) fn clear(&mut self) {
        self.keys.clear();
        self.spans.clear();
    }

    /// Adds the term made of `parts` joined by `sep`.
    pub(crate) fn push<'p>(&mut self, parts: impl IntoIterator<Item = &'p [u8]>, sep: u8) {
        let start = self.keys.len();
        for (j, part) in parts.into_iter().enumerate() {
            if j > 0 {
                self.keys.push(sep);
            }
            self.keys.extend_from_slice(part);
        }
        self.spans.push((start, self.keys.len()));
    }
}

/// The index's arrays, borrowed for a run of lookups.
#[derive(Clone, Copy)]
pub(crate) struct Tables<'a> {
    hot: &'a [u32],
    cold: &'a [u32],
    terms: &'a [u8],
}

impl<'a> Tables<'a> {
    /// The id and the term of the record at byte `off`.
    #[inline]
    fn record(&self, off: usize) -> Option<(u32, &'a [u8])> {
        let head = self.terms.get(off..off.checked_add(HEAD)?)?;
        let (id, len) = head.split_at(4);
        let id = u32::from_le_bytes(id.try_into().ok()?);
        let len = u32::from_le_bytes(len.try_into().ok()?) as usize;
        let from = off + HEAD;
        Some((id, self.terms.get(from..from.checked_add(len)?)?))
    }

    /// Calls `f(k, id)` for the `k`th term of `batch`, for every term but in no set order,
    /// with its feature id (`None` for a term the vocabulary does not hold): the answers of
    /// [`Tables::get`], found faster. A term that occurs twice is looked up once. The hot table
    /// answers most terms from the cache. For the others, looking up one by one would wait on
    /// two cache misses per term, the slot and then the record, one after the other; here their
    /// cold home slots are read in one loop whose reads do not depend on each other, so that the
    /// processor overlaps the misses, and then their records.
    pub(crate) fn get_batch(&self, batch: &mut Batch, mut f: impl FnMut(usize, Option<u32>)) {
        let Batch {
            keys,
            spans,
            order,
            distinct,
        } = batch;
        let key = |k: u32| {
            let (s, e) = spans.get(k as usize).copied().unwrap_or((0, 0));
            keys.get(s..e).unwrap_or(&[])
        };
        // By hash, so that a term's occurrences meet.
        order.clear();
        order.extend((0..spans.len() as u32).map(|k| (term_hash(key(k)), k)));
        order.sort_unstable();
        distinct.clear();
        for &(hash, k) in order.iter() {
            // Two terms of one hash could alternate in `order`; each run is then looked up, and
            // the answers are still right.
            match distinct.last_mut() {
                Some(d) if d.hash == hash && key(d.first) == key(k) => d.count += 1,
                _ => distinct.push(Distinct {
                    hash,
                    first: k,
                    count: 1,
                    id: None,
                    off: EMPTY,
                }),
            }
        }
        for d in distinct.iter_mut() {
            d.id = self.probe(self.hot, d.hash, key(d.first));
        }
        let cold_mask = (self.cold.len() / 2).wrapping_sub(1);
        for d in distinct.iter_mut().filter(|d| d.id.is_none()) {
            let i = (d.hash as usize) & cold_mask;
            if let Some(&[tag, off]) = self.cold.get(2 * i..2 * i + 2) {
                d.off = if tag == (d.hash >> 32) as u32 || off == EMPTY {
                    off
                } else {
                    PROBE
                };
            }
        }
        let mut k = 0;
        for d in distinct.iter() {
            let term = key(d.first);
            let id = match (d.id, d.off) {
                (Some(id), _) => Some(id),
                (None, EMPTY) => None,
                (None, PROBE) => self.probe(self.cold, d.hash, term),
                (None, off) => match self.record(off as usize) {
                    Some((id, stored)) if stored == term => Some(id),
                    _ => self.probe(self.cold, d.hash, term),
                },
            };
            // The occurrences of the term are the next `count` of `order`.
            for &(_, number) in order.get(k..k + d.count as usize).unwrap_or(&[]) {
                f(number as usize, id);
            }
            k += d.count as usize;
        }
    }

    /// The feature id of `term`, if the vocabulary holds it.
    #[inline]
    pub(crate) fn get(&self, term: &[u8]) -> Option<u32> {
        let h = term_hash(term);
        self.probe(self.hot, h, term)
            .or_else(|| self.probe(self.cold, h, term))
    }

    /// The id of `term`, of hash `h`, if `table` holds it.
    #[inline]
    fn probe(&self, table: &[u32], h: u64, term: &[u8]) -> Option<u32> {
        let size = table.len() / 2;
        let mask = size.wrapping_sub(1);
        let tag = (h >> 32) as u32;
        let mut i = (h as usize) & mask;
        for _ in 0..size {
            let [slot_tag, off] = *table.get(2 * i..2 * i + 2)? else {
                return None;
            };
            if off == EMPTY {
                return None;
            }
            if slot_tag == tag {
                if let Some((id, stored)) = self.record(off as usize) {
                    if stored == term {
                        return Some(id);
                    }
                }
            }
            i = (i + 1) & mask;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn view(ix: &TermIndex, n: usize) -> Result<TermIndexView, TermIndexError> {
        TermIndexView::new(Section::copy_of(&ix.slots), Section::copy_of(&ix.terms), n)
    }

    /// The whole full check against the vocabulary `terms` (term `i` at id `i`).
    fn verify_all(v: &TermIndexView, n: usize, terms: &[Vec<u8>]) -> Result<(), TermIndexError> {
        v.verify(n)?;
        for (id, term) in terms.iter().enumerate() {
            v.check_term(term, id as u64)?;
        }
        Ok(())
    }

    #[test]
    fn every_term_is_found_at_its_id_and_no_other_is() {
        // More terms than the hot table holds, so that both tables are used.
        let terms: Vec<Vec<u8>> = (0..5000u32)
            .map(|i| format!("term{i}").into_bytes())
            .chain([Vec::new(), b"a b".to_vec()])
            .collect();
        let ix = TermIndex::build(terms.iter().map(Vec::as_slice)).unwrap();
        assert_eq!(
            Some(&ix),
            TermIndex::build(terms.iter().map(Vec::as_slice)).as_ref()
        );
        assert_eq!(ix.slots.len(), 2 * (8192 + 2048));
        let v = view(&ix, terms.len()).unwrap();
        let t = v.tables();
        for (id, term) in terms.iter().enumerate() {
            assert_eq!(t.get(term), Some(id as u32));
        }
        let misses = [&b"term5000"[..], b"term", b"a", b"a  b", b"xterm1"];
        for miss in misses {
            assert_eq!(t.get(miss), None);
        }
        // A batch answers as the lookups one by one, in order.
        let mut batch = Batch::default();
        for round in 0..2 {
            batch.clear();
            let asked: Vec<&[u8]> = terms
                .iter()
                .map(Vec::as_slice)
                .chain(misses)
                .skip(round)
                .collect();
            for a in &asked {
                batch.push([*a], b' ');
            }
            batch.push([&b"a"[..], b"b"], b' ');
            let mut got = vec![Some(u32::MAX); asked.len() + 1];
            t.get_batch(&mut batch, |k, id| got[k] = id);
            let mut want: Vec<Option<u32>> = asked.iter().map(|a| t.get(a)).collect();
            want.push(Some(5001));
            assert_eq!(got, want);
        }
        verify_all(&v, terms.len(), &terms).unwrap();
        // The vocabulary must be the index's: a term it lacks, or one at another id, is caught.
        let mut other = terms.clone();
        other[5] = b"elsewhere".to_vec();
        assert!(verify_all(&v, terms.len(), &other).is_err());
        other.swap(5, 6);
        assert!(verify_all(&v, terms.len(), &other).is_err());
    }

    #[test]
    fn damaged_indexes_are_refused_and_never_panic() {
        let terms: Vec<Vec<u8>> = (0..50u32).map(|i| format!("w{i}").into_bytes()).collect();
        let n = terms.len();
        let ix = TermIndex::build(terms.iter().map(Vec::as_slice)).unwrap();
        // Shapes: an odd or wrong slot count, records too short for the term count.
        let mut odd = ix.clone();
        odd.slots.pop();
        let mut few = ix.clone();
        few.slots.truncate(64);
        let mut short = ix.clone();
        short.terms.truncate(8 * n - 1);
        for bad in [odd, few, short] {
            let err = view(&bad, n).err().unwrap();
            assert!(err.to_string().contains("text.index"), "{err}");
        }
        // Contents: a slot pointing at no record, a changed id, a changed term byte, a cut last
        // record, a full table (no empty slot). Each passes the structural open, answers lookups
        // without panicking, and fails the full check.
        let used = ix
            .slots
            .chunks_exact(2)
            .position(|p| p[1] != EMPTY)
            .unwrap();
        let mut moved = ix.clone();
        moved.slots[2 * used + 1] = 4_000_000;
        let mut stray = ix.clone();
        stray.slots[2 * used + 1] += 1;
        let mut id = ix.clone();
        id.terms[0] = 7;
        let mut byte = ix.clone();
        byte.terms[8] ^= 0x20;
        let mut cut = ix.clone();
        cut.terms.pop();
        let mut full = ix.clone();
        for p in full.slots.chunks_exact_mut(2) {
            p[1] = 0;
        }
        for (what, bad) in [
            ("moved", moved),
            ("stray", stray),
            ("id", id),
            ("byte", byte),
            ("cut", cut),
            ("full", full),
        ] {
            let v = view(&bad, n).unwrap();
            let mut batch = Batch::default();
            for t in &terms {
                let _ = v.tables().get(t);
                batch.push([t.as_slice()], b' ');
            }
            v.tables().get_batch(&mut batch, |_, _| {});
            assert_eq!(v.tables().get(b"absent"), None, "{what}");
            let err = verify_all(&v, n, &terms).unwrap_err();
            assert!(err.to_string().contains("text.index"), "{what}: {err}");
        }
    }
}
