//! Entry encodings: output widths, packed bfloat16 entries, and the runs that read them.

use super::*;

/// The exponent bits of an `f32`.
pub(super) const F32_EXP: u32 = 0x7f80_0000;

/// Values stored at one of three widths.
///
/// A tree's entry outputs are written at the narrowest width that holds its largest one (format
/// version 3 on): a leaf's outputs are its labels, rarely more than a few hundred, so `u8` or
/// `u16` usually does, and the entries shrink from eight bytes to five or six.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Widths<A, B, C> {
    /// `u8` values.
    U8(A),
    /// `u16` values.
    U16(B),
    /// `u32` values.
    U32(C),
}

/// Evaluates `$body` with `$o` bound to the value inside `$widths`, whichever width it is, so
/// that a generic loop in `$body` is compiled once per width and the width is matched once.
macro_rules! with_width {
    ($widths:expr, |$o:ident| $body:expr) => {
        match $widths {
            Widths::U8($o) => $body,
            Widths::U16($o) => $body,
            Widths::U32($o) => $body,
        }
    };
}

/// Entry outputs as a plain slice of one width.
pub type OutSlice<'a> = Widths<&'a [u8], &'a [u16], &'a [u32]>;

impl OutSlice<'_> {
    /// The number of outputs.
    pub fn len(&self) -> usize {
        with_width!(self, |o| o.len())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Their size in bytes.
    pub fn byte_len(&self) -> usize {
        match self {
            Widths::U8(o) => o.len(),
            Widths::U16(o) => 2 * o.len(),
            Widths::U32(o) => 4 * o.len(),
        }
    }

    /// Output `i`, if there is one.
    #[inline]
    pub fn get(&self, i: usize) -> Option<u32> {
        match self {
            Widths::U8(o) => o.get(i).map(|&v| u32::from(v)),
            Widths::U16(o) => o.get(i).map(|&v| u32::from(v)),
            Widths::U32(o) => o.get(i).copied(),
        }
    }
}

/// Storage of a tree's entry outputs: `u32`s (while training, and in bundles before format
/// version 3), or values of any of the three widths.
pub trait EntryOuts {
    /// The outputs as a slice.
    fn outs(&self) -> OutSlice<'_>;
}

impl<T: std::ops::Deref<Target = [u32]>> EntryOuts for T {
    #[inline]
    fn outs(&self) -> OutSlice<'_> {
        Widths::U32(self)
    }
}

impl<A, B, C> EntryOuts for Widths<A, B, C>
where
    A: std::ops::Deref<Target = [u8]>,
    B: std::ops::Deref<Target = [u16]>,
    C: std::ops::Deref<Target = [u32]>,
{
    #[inline]
    fn outs(&self) -> OutSlice<'_> {
        match self {
            Widths::U8(o) => Widths::U8(o),
            Widths::U16(o) => Widths::U16(o),
            Widths::U32(o) => Widths::U32(o),
        }
    }
}

/// Entry outputs narrowed from `u32`s (the narrower widths copied, `u32`s borrowed).
pub type NarrowOuts<'a> = Widths<Vec<u8>, Vec<u16>, &'a [u32]>;

/// `outs` at the narrowest width that holds them all, for writing.
pub fn narrowest(outs: &[u32]) -> NarrowOuts<'_> {
    let max = outs.iter().copied().max().unwrap_or(0);
    if u8::try_from(max).is_ok() {
        Widths::U8(outs.iter().map(|&o| o as u8).collect())
    } else if u16::try_from(max).is_ok() {
        Widths::U16(outs.iter().map(|&o| o as u16).collect())
    } else {
        Widths::U32(outs)
    }
}

/// Packs entry output `out` (below 2^16) and weight `w` into one word: the output in the high
/// 16 bits, `w` rounded to the nearest bfloat16 in the low 16. A finite weight beyond the
/// largest bfloat16 is truncated to it rather than rounded to an infinity.
pub fn pack_entry(out: u16, w: f32) -> u32 {
    let bits = w.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    let half = if w.is_finite() && rounded & (F32_EXP >> 16) == F32_EXP >> 16 {
        bits >> 16
    } else {
        rounded
    };
    (u32::from(out) << 16) | (half & 0xffff)
}

/// The weight of packed entry `word` (see [`pack_entry`]).
#[inline]
pub fn packed_weight(word: u32) -> f32 {
    f32::from_bits(word << 16)
}

/// `w` rounded to the nearest bfloat16, as [`pack_entry`] stores it, widened back to `f32`.
pub fn round_bf16(w: f32) -> f32 {
    packed_weight(pack_entry(0, w))
}

/// `outs` and `weights` packed one entry per word ([`pack_entry`]), or `None` when an output
/// does not fit 16 bits.
pub fn pack_entries(outs: &[u32], weights: &[f32]) -> Option<Vec<u32>> {
    outs.iter()
        .zip(weights)
        .map(|(&o, &w)| u16::try_from(o).ok().map(|o| pack_entry(o, w)))
        .collect()
}

/// A tree's entries over plain slices, in either stored layout.
#[derive(Clone, Copy, Debug)]
pub enum EntrySlice<'a> {
    /// Outputs at one of three widths and `f32` weights, in two arrays.
    Split(OutSlice<'a>, &'a [f32]),
    /// One word per entry ([`pack_entry`]).
    Packed(&'a [u32]),
}

/// What the scoring and validation loops read of one entry layout. Each layout is a type of its
/// own, so that a loop over entries is compiled once per layout and the layout is matched once
/// per node ([`with_entries`]).
pub(super) trait EntryRun: Copy {
    /// The number of entries.
    fn len(self) -> usize;
    /// Entry `e`'s output and weight.
    fn get(self, e: usize) -> Option<(u32, f32)>;
    /// Loads entry `e` (its output and weight bits, combined), for touching it early.
    fn touch(self, e: usize) -> u32;
    /// Adds entries `a..b` times `x` to `acc`. An empty or out-of-bounds range (only a bundle
    /// opened without the O(weights) checks can hold one) adds nothing, as does an output past
    /// `acc`. With at least [`OUT_SLOTS`] slots in `acc`, an output of 16 bits or fewer needs no
    /// bounds check per entry.
    fn add_range(self, a: usize, b: usize, x: f32, acc: &mut [f32]);
    /// Calls `f` with the output and weight of each of entries `a..b`, in order (nothing for an
    /// empty or out-of-bounds range).
    fn for_range<G: FnMut(u32, f32)>(self, a: usize, b: usize, f: G);
    /// The largest output and the largest weight exponent bits (as in an `f32`) over entries
    /// `a..b`, both 0 when the range is empty or out of bounds. Branch-free, so it vectorizes.
    fn max_in(self, a: usize, b: usize) -> (u32, u32);
}

/// Split entries of one output width.
#[derive(Clone, Copy)]
pub(super) struct Split<'a, T> {
    pub(super) outs: &'a [T],
    pub(super) weights: &'a [f32],
}

impl<T: Copy + Into<u32>> EntryRun for Split<'_, T> {
    #[inline]
    fn len(self) -> usize {
        self.outs.len()
    }

    #[inline]
    fn get(self, e: usize) -> Option<(u32, f32)> {
        Some(((*self.outs.get(e)?).into(), *self.weights.get(e)?))
    }

    #[inline]
    fn touch(self, e: usize) -> u32 {
        self.outs.get(e).map_or(0, |&o| o.into()) ^ self.weights.get(e).map_or(0, |w| w.to_bits())
    }

    #[inline]
    fn add_range(self, a: usize, b: usize, x: f32, acc: &mut [f32]) {
        let (Some(outs), Some(weights)) = (self.outs.get(a..b), self.weights.get(a..b)) else {
            return;
        };
        // `u8` and `u16` outputs are below `OUT_SLOTS`, so the compiler drops the check; `u32`
        // ones may not be, and take the loop below, checked against all of `acc`.
        if size_of::<T>() <= 2 {
            if let Some(slots) = acc.first_chunk_mut::<OUT_SLOTS>() {
                for (&o, &w) in outs.iter().zip(weights) {
                    let o: u32 = o.into();
                    if let Some(slot) = slots.get_mut(o as usize) {
                        *slot += w * x;
                    }
                }
                return;
            }
        }
        for (&o, &w) in outs.iter().zip(weights) {
            let o: u32 = o.into();
            if let Some(slot) = acc.get_mut(o as usize) {
                *slot += w * x;
            }
        }
    }

    #[inline]
    fn for_range<G: FnMut(u32, f32)>(self, a: usize, b: usize, mut f: G) {
        let (Some(outs), Some(weights)) = (self.outs.get(a..b), self.weights.get(a..b)) else {
            return;
        };
        for (&o, &w) in outs.iter().zip(weights) {
            f(o.into(), w);
        }
    }

    fn max_in(self, a: usize, b: usize) -> (u32, u32) {
        let (Some(outs), Some(weights)) = (self.outs.get(a..b), self.weights.get(a..b)) else {
            return (0, 0);
        };
        (
            outs.iter().fold(0u32, |acc, &v| acc.max(v.into())),
            weights
                .iter()
                .fold(0u32, |acc, w| acc.max(w.to_bits() & F32_EXP)),
        )
    }
}

/// Packed entries.
#[derive(Clone, Copy)]
pub(super) struct Packed<'a>(pub(super) &'a [u32]);

impl EntryRun for Packed<'_> {
    #[inline]
    fn len(self) -> usize {
        self.0.len()
    }

    #[inline]
    fn get(self, e: usize) -> Option<(u32, f32)> {
        self.0.get(e).map(|&word| (word >> 16, packed_weight(word)))
    }

    #[inline]
    fn touch(self, e: usize) -> u32 {
        self.0.get(e).copied().unwrap_or(0)
    }

    #[inline]
    fn add_range(self, a: usize, b: usize, x: f32, acc: &mut [f32]) {
        let Some(words) = self.0.get(a..b) else {
            return;
        };
        if let Some(slots) = acc.first_chunk_mut::<OUT_SLOTS>() {
            // A packed output has 16 bits: always a slot, no check. Two entries a step halve
            // the loop's overhead (the adds keep their order, so the sums are the same).
            let mut pairs = words.chunks_exact(2);
            for pair in &mut pairs {
                let (u, v) = (pair[0], pair[1]);
                slots[(u >> 16) as usize] += packed_weight(u) * x;
                slots[(v >> 16) as usize] += packed_weight(v) * x;
            }
            for &word in pairs.remainder() {
                slots[(word >> 16) as usize] += packed_weight(word) * x;
            }
            return;
        }
        for &word in words {
            if let Some(slot) = acc.get_mut((word >> 16) as usize) {
                *slot += packed_weight(word) * x;
            }
        }
    }

    #[inline]
    fn for_range<G: FnMut(u32, f32)>(self, a: usize, b: usize, mut f: G) {
        for &word in self.0.get(a..b).unwrap_or(&[]) {
            f(word >> 16, packed_weight(word));
        }
    }

    fn max_in(self, a: usize, b: usize) -> (u32, u32) {
        self.0.get(a..b).map_or((0, 0), |words| {
            words.iter().fold((0u32, 0u32), |(o, e), &word| {
                (o.max(word >> 16), e.max((word << 16) & F32_EXP))
            })
        })
    }
}

/// Evaluates `$body` with `$e` bound to the [`EntryRun`] of `$entries` (an [`EntrySlice`]),
/// whichever layout and width it is, so that a generic loop in `$body` is compiled once per
/// layout and the layout is matched once.
macro_rules! with_entries {
    ($entries:expr, |$e:ident| $body:expr) => {
        match $entries {
            EntrySlice::Split(Widths::U8(outs), weights) => {
                let $e = Split { outs, weights };
                $body
            }
            EntrySlice::Split(Widths::U16(outs), weights) => {
                let $e = Split { outs, weights };
                $body
            }
            EntrySlice::Split(Widths::U32(outs), weights) => {
                let $e = Split { outs, weights };
                $body
            }
            EntrySlice::Packed(words) => {
                let $e = Packed(words);
                $body
            }
        }
    };
}
