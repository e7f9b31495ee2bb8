//! The one layering mechanism behind both train and serve settings.
//!
//! A settings struct is a serde struct with `deny_unknown_fields`. Its compiled-in defaults are
//! the first layer; each later source (a file's table, one environment variable, one `--set`)
//! is a [`Layer`]: a dictionary of values with the source's name. [`extract`] merges the layers
//! in order with `figment` (a later layer wins key by key, tables merge) and deserializes the
//! struct once. A refusal names the dotted key and the last layer that set it.
//!
//! Values written as text (environment variables, `--set`) are typed by the default at their
//! place: text stays text where the default is a string, and is read as a TOML value (a number,
//! a boolean, `inf`) elsewhere. Where the default is a boolean, `on` and `off` are accepted too.
//!
//! It imports nothing from the crate, so that a stage's own settings (`DefragParams`,
//! `TextConfig`) can use its helpers and its [`ConfigError`] without importing the trainer's
//! configuration, which gathers them.

use figment::providers::Serialized;
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::cell::Cell;
use thiserror::Error;

/// A configuration error, naming the key or file at fault.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading config {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("parsing config {path}: {message}")]
    Toml {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A key is not known.
    #[error("unknown config key `{key}` in {source_name} (known keys: {known})")]
    UnknownKey {
        /// The key.
        key: String,
        /// Where it was given (a file, an environment variable, a `--set`).
        source_name: String,
        /// The keys that are known.
        known: String,
    },
    /// A value has the wrong type or is out of range. The message says where it was given.
    #[error("config key `{key}`: {message}")]
    BadValue {
        /// The key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A `--set` argument is not `key=value`.
    #[error("--set `{0}` is not of the form key=value")]
    BadOverride(String),
}

thread_local! {
    static SERIALIZE_ALL: Cell<bool> = const { Cell::new(false) };
}

/// A `skip_serializing_if` predicate: leaves a field out of a bundle's metadata when it holds
/// its default, so that bundles which do not use a newer setting keep their bytes. The key
/// listing ([`full_dict`]) still sees the field.
pub fn omit_default<T: PartialEq + Default>(value: &T) -> bool {
    !SERIALIZE_ALL.with(Cell::get) && *value == T::default()
}

/// Every field of `value` as a dictionary, none left out by [`omit_default`].
pub fn full_dict<T: Serialize>(value: &T) -> Dict {
    SERIALIZE_ALL.with(|f| f.set(true));
    let v = Value::serialize(value);
    SERIALIZE_ALL.with(|f| f.set(false));
    match v {
        Ok(Value::Dict(_, d)) => d,
        _ => Dict::new(),
    }
}

/// The dotted key of every leaf of `dict`, sorted.
pub fn leaf_keys(dict: &Dict) -> Vec<String> {
    fn walk(prefix: &str, dict: &Dict, out: &mut Vec<String>) {
        for (k, v) in dict {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                Value::Dict(_, d) => walk(&key, d, out),
                _ => out.push(key),
            }
        }
    }
    let mut out = Vec::new();
    walk("", dict, &mut out);
    out.sort();
    out
}

/// The value at dotted `key` of `dict`.
pub fn get<'a>(dict: &'a Dict, key: &str) -> Option<&'a Value> {
    let mut parts = key.split('.');
    let mut value = dict.get(parts.next()?)?;
    for part in parts {
        match value {
            Value::Dict(_, d) => value = d.get(part)?,
            _ => return None,
        }
    }
    Some(value)
}

/// Sets the value at dotted `key` of `dict`, making the tables on the way.
pub fn insert(dict: &mut Dict, key: &str, value: Value) {
    match key.split_once('.') {
        None => {
            dict.insert(key.to_string(), value);
        }
        Some((head, rest)) => {
            let entry = dict
                .entry(head.to_string())
                .or_insert_with(|| Value::from(Dict::new()));
            if !matches!(entry, Value::Dict(..)) {
                *entry = Value::from(Dict::new());
            }
            if let Value::Dict(_, d) = entry {
                insert(d, rest, value);
            }
        }
    }
}

/// Removes and returns the value at dotted `key` of `dict`.
pub fn remove(dict: &mut Dict, key: &str) -> Option<Value> {
    match key.split_once('.') {
        None => dict.remove(key),
        Some((head, rest)) => match dict.get_mut(head)? {
            Value::Dict(_, d) => remove(d, rest),
            _ => None,
        },
    }
}

/// The values of one source, merged over the layers before it.
#[derive(Clone, Debug)]
pub struct Layer {
    /// Where the values come from, as errors name it (`file config/x.toml`,
    /// `environment variable XMC_MAX_K`, `--set trees=3`).
    pub source: String,
    /// The values, nested by dotted key.
    pub dict: Dict,
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.source.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Map::from([(Profile::Default, self.dict.clone())]))
    }
}

/// A refused setting: the dotted key, the layer that set it, and what is wrong.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The dotted key.
    pub key: String,
    /// The source of the last layer that set the key (`defaults` if none did).
    pub source: String,
    /// What is wrong.
    pub message: String,
    /// Whether the key is unknown (rather than its value bad).
    pub unknown: bool,
}

impl Layer {
    /// A layer from a TOML table (a file's `[train]` or `[serve]`), typed by `defaults`.
    pub fn from_toml(
        source: String,
        table: &toml::Value,
        defaults: &Dict,
    ) -> Result<Layer, Refusal> {
        let dict = match Value::serialize(table) {
            Ok(Value::Dict(_, d)) => d,
            _ => {
                return Err(Refusal {
                    key: String::new(),
                    message: "must be a table".into(),
                    source,
                    unknown: false,
                });
            }
        };
        let mut layer = Layer { source, dict };
        for key in leaf_keys(&layer.dict) {
            if let Some(value) = remove(&mut layer.dict, &key) {
                let typed = layer.typed(&key, value, defaults)?;
                insert(&mut layer.dict, &key, typed);
            }
        }
        Ok(layer)
    }

    /// A layer of one dotted key whose value is written as text (`--set`, an environment
    /// variable), typed by the default at `key`.
    pub fn from_text(
        source: String,
        key: &str,
        raw: &str,
        defaults: &Dict,
    ) -> Result<Layer, Refusal> {
        let parsed = format!("v = {raw}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"));
        let value = match (get(defaults, key), parsed) {
            (Some(Value::String(..)), Some(toml::Value::String(s))) => Value::from(s),
            (Some(Value::String(..)), _) | (_, None) => Value::from(raw.to_string()),
            (_, Some(v)) => Value::serialize(v).unwrap_or_else(|_| Value::from(raw.to_string())),
        };
        let mut layer = Layer {
            source,
            dict: Dict::new(),
        };
        let typed = layer.typed(key, value, defaults)?;
        insert(&mut layer.dict, key, typed);
        Ok(layer)
    }

    /// Reads a string as the type of the default at `key`: a boolean (`true`, `false`, `on`,
    /// `off`) or a number. Anything else is left to deserialization to refuse.
    fn typed(&self, key: &str, value: Value, defaults: &Dict) -> Result<Value, Refusal> {
        let Value::String(_, s) = &value else {
            return Ok(value);
        };
        match get(defaults, key) {
            Some(Value::Bool(..)) => match s.as_str() {
                "true" | "on" => Ok(Value::from(true)),
                "false" | "off" => Ok(Value::from(false)),
                other => Err(Refusal {
                    key: key.to_string(),
                    source: self.source.clone(),
                    message: format!("`{other}` is not true/false or on/off"),
                    unknown: false,
                }),
            },
            Some(Value::Num(..)) => Ok(format!("v = {s}")
                .parse::<toml::Table>()
                .ok()
                .and_then(|mut t| t.remove("v"))
                .filter(|v| v.is_integer() || v.is_float())
                .and_then(|v| Value::serialize(v).ok())
                .unwrap_or(value)),
            _ => Ok(value),
        }
    }
}

/// Merges `layers` over `defaults` and deserializes the result, or names the key refused.
pub fn extract<T: Serialize + DeserializeOwned>(
    defaults: &T,
    layers: &[Layer],
) -> Result<T, Refusal> {
    let figment = layers.iter().fold(
        Figment::from(Serialized::defaults(defaults)),
        |figment, layer| figment.merge(layer.clone()),
    );
    figment.extract::<T>().map_err(|e| {
        let mut path = e.path.clone();
        let unknown = match &e.kind {
            figment::error::Kind::UnknownField(field, _) => {
                // The path may or may not already end with the field.
                if path.last() != Some(field) {
                    path.push(field.clone());
                }
                true
            }
            _ => false,
        };
        let key = path.join(".");
        let source = layers
            .iter()
            .rev()
            .find(|l| get(&l.dict, &key).is_some())
            .map_or_else(|| "defaults".to_string(), |l| l.source.clone());
        Refusal {
            key,
            source,
            message: e.kind.to_string(),
            unknown,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_typed_by_the_default_at_its_place() {
        let mut defaults = Dict::new();
        insert(&mut defaults, "a.n", Value::from(3u64));
        insert(&mut defaults, "a.on", Value::from(false));
        insert(&mut defaults, "name", Value::from("x".to_string()));
        let layer = |key: &str, raw: &str| Layer::from_text("t".into(), key, raw, &defaults);
        let v = layer("a.n", "7").unwrap();
        assert_eq!(
            get(&v.dict, "a.n").and_then(|v| v.deserialize::<u64>().ok()),
            Some(7)
        );
        let v = layer("a.on", "on").unwrap();
        assert_eq!(get(&v.dict, "a.on").and_then(Value::to_bool), Some(true));
        let err = layer("a.on", "yes").unwrap_err();
        assert_eq!((err.key.as_str(), err.source.as_str()), ("a.on", "t"));
        let v = layer("name", "123").unwrap();
        assert_eq!(get(&v.dict, "name").and_then(Value::as_str), Some("123"));
        let v = layer("name", "\"quoted\"").unwrap();
        assert_eq!(get(&v.dict, "name").and_then(Value::as_str), Some("quoted"));
        assert_eq!(leaf_keys(&defaults), ["a.n", "a.on", "name"]);
    }
}
