//! Label and feature names, packed into one string.
//!
//! A bundle stores names as a JSON array of strings. Parsing that into a `Vec<String>` made one
//! allocation per name: 77,092 of them for debian-deps' labels and features, each freed again
//! when the model is released, both on a server's swap. [`Names`] appends every name to one
//! buffer and keeps where each ends.

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, SeqAccess, Visitor};
use std::fmt;

/// A list of names in one buffer: name `i` is `text[ends[i - 1]..ends[i]]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    text: String,
    ends: Vec<usize>,
}

impl Names {
    /// How many names there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Name `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = i.checked_sub(1).map_or(0, |p| self.ends[p]);
        self.text.get(start..end)
    }

    /// Every name, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Parses a JSON array of strings, as deserializing does, and calls `step_done` after every
    /// [`NAMES_STEP`] names (a loader yields the CPU there). The text buffer is sized from the
    /// JSON's length up front, so it is never copied while it grows.
    pub fn parse(json: &[u8], step_done: impl FnMut()) -> serde_json::Result<Names> {
        let mut de = serde_json::Deserializer::from_slice(json);
        let names = de.deserialize_seq(NamesVisitor {
            text_capacity: json.len(),
            step_done,
        })?;
        de.end()?;
        Ok(names)
    }
}

/// How many names [`Names::parse`] reads between calls of its `step_done`: a step short next
/// to a scheduler tick (docs/decisions/0010-loading-under-sched-idle.md).
pub const NAMES_STEP: usize = 4096;

impl<S: AsRef<str>> FromIterator<S> for Names {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let mut names = Names::default();
        for s in iter {
            names.text.push_str(s.as_ref());
            names.ends.push(names.text.len());
        }
        names
    }
}

/// Appends one JSON string to a buffer, borrowing it from the input where it has no escapes.
struct Append<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for Append<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for Append<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a name (a string)")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.0.push_str(v);
        Ok(())
    }
}

struct NamesVisitor<F> {
    /// Bytes to reserve for the text (an upper bound when known, else 0).
    text_capacity: usize,
    step_done: F,
}

impl<'de, F: FnMut()> Visitor<'de> for NamesVisitor<F> {
    type Value = Names;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of names (strings)")
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Names, A::Error> {
        let mut names = Names::default();
        names.text.reserve(self.text_capacity);
        if let Some(n) = seq.size_hint() {
            names.ends.reserve(n);
        }
        while seq.next_element_seed(Append(&mut names.text))?.is_some() {
            names.ends.push(names.text.len());
            if names.ends.len() % NAMES_STEP == 0 {
                (self.step_done)();
            }
        }
        // The JSON's quotes and separators were reserved too. (A large buffer shrinks in place.)
        names.text.shrink_to_fit();
        Ok(names)
    }
}

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Names, D::Error> {
        deserializer.deserialize_seq(NamesVisitor {
            text_capacity: 0,
            step_done: || {},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_a_vec_of_strings_would() {
        let json = r#"["a", "", "b\"c\u00e9", "日本", "x y"]"#;
        let names: Names = serde_json::from_str(json).unwrap();
        let plain: Vec<String> = serde_json::from_str(json).unwrap();
        assert_eq!(names.len(), plain.len());
        assert_eq!(names.iter().collect::<Vec<_>>(), plain);
        assert_eq!(names.get(2), Some("b\"cé"));
        assert_eq!(names.get(1), Some(""));
        assert_eq!(names.get(5), None);
        assert_eq!(names, plain.iter().collect::<Names>());
    }

    #[test]
    fn refuses_what_is_not_an_array_of_strings() {
        for bad in [
            r#"["a", 1]"#,
            r#"{"a": "b"}"#,
            r#""a""#,
            r#"["a""#,
            "[null]",
        ] {
            assert!(serde_json::from_str::<Names>(bad).is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<Names>("[]").unwrap().is_empty());
        for bad in [r#"["a", 1]"#, r#"["a"] x"#, r#"["a""#, "{}"] {
            assert!(Names::parse(bad.as_bytes(), || {}).is_err(), "{bad}");
        }
    }

    #[test]
    fn parse_gives_what_deserializing_gives_and_marks_its_steps() {
        let plain: Vec<String> = (0..2 * NAMES_STEP + 5)
            .map(|i| format!("label \"{i}\" é"))
            .collect();
        let json = serde_json::to_vec(&plain).unwrap();
        let mut steps = 0;
        let parsed = Names::parse(&json, || steps += 1).unwrap();
        assert_eq!(parsed, serde_json::from_slice::<Names>(&json).unwrap());
        assert_eq!(parsed.iter().collect::<Vec<_>>(), plain);
        assert_eq!(steps, 2);
    }
}
