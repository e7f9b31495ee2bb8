//! Server configuration in layers: compiled-in defaults, then the `[serve]` table of a TOML file,
//! then `XMC_<KEY>` environment variables, then command-line flags, merged by the layering that
//! train settings use too ([`crate::settings`]). Every error names its key.

use crate::settings::{self as layers, Layer, Refusal};
use figment::value::Dict;
use serde::{Deserialize, Deserializer, Serialize};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a configuration was refused.
#[derive(Debug, Error)]
pub enum ServeConfigError {
    /// The file could not be read or parsed.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A key is unknown.
    #[error("unknown server setting `{key}` in {source_name} (known: {known})")]
    UnknownKey {
        /// The key as written.
        key: String,
        /// Where it was given.
        source_name: String,
        /// The known keys.
        known: String,
    },
    /// A key has a bad value.
    #[error("server setting `{key}` ({source_name}): {message}")]
    BadValue {
        /// The key.
        key: String,
        /// Where the value came from.
        source_name: String,
        /// What is wrong.
        message: String,
    },
}

/// How logs are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Where a single prediction (`POST /v1/predict`) runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinglePredict {
    /// On the async worker that parsed the request, with a thread-local scratch.
    Inline,
    /// Handed to the prediction pool, as batches are, and awaited.
    Pool,
}

/// How the API's connections are spread over threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Runtime {
    /// One multi-threaded tokio runtime, one worker per core, sharing work by stealing.
    Shared,
    /// One single-threaded runtime per core, each accepting on a listener of its own
    /// (`SO_REUSEPORT`, so the kernel spreads connections over them): a connection stays on one
    /// thread, and no worker wakes another to share its work (Unix only).
    PerCore,
}

/// What a model load checks before the model is published.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadChecks {
    /// Every section's checksum and the model's structure (lengths, offsets, tree topology,
    /// label ids, the sizes of the feature indexes): the file is byte for byte what its writer
    /// wrote, and no query can make the search panic or loop. O(file) reading, O(nodes +
    /// labels) checking.
    Checksums,
    /// That, and every weight entry, hash slot, rank block and name section
    /// ([`crate::model::Model::from_bundle`]): one more pass over the weights.
    Full,
}

/// Everything `xmc serve` can be told.
///
/// A new setting is one field here: a doc comment and a value in [`ServeConfig::defaults`]. Its
/// key is the field's name, and its environment variable `XMC_` + the name in upper case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    /// The address the API listens on.
    pub bind: String,
    /// A separate address for `/metrics`; `None` (or empty text) serves it on the API port.
    #[serde(deserialize_with = "text_or_none")]
    pub metrics_bind: Option<String>,
    /// The address of the Open Inference Protocol's gRPC service
    /// (`inference.GRPCInferenceService`); `None` (or empty text): no gRPC.
    #[serde(deserialize_with = "text_or_none")]
    pub grpc_bind: Option<String>,
    /// The model bundle (a file or a symlink to one), served as a repository of one model
    /// named after the file's stem, version 1; unused when `repository` is set.
    pub model: PathBuf,
    /// The name `model` serves under (`/v2/models/{name}`, `/v1/models/{name}/predict`);
    /// `None` (or empty text): the file's stem.
    #[serde(deserialize_with = "text_or_none")]
    pub model_name: Option<String>,
    /// A model repository: every `<name>/<version>/model.xmcb` under this directory is served,
    /// versions being positive integers (Triton's layout); `None` (or empty text) serves `model`.
    #[serde(deserialize_with = "text_or_none")]
    pub repository: Option<String>,
    /// Which versions of each repository model serve: `latest:N`, `all` or `specific:V,V,...`
    /// (a model's own `model.toml` may set its own `version_policy`).
    pub version_policy: String,
    /// The model the `/v1` routes answer for; `None` (or empty text): the first name in sorted
    /// order that has a version serving.
    #[serde(deserialize_with = "text_or_none")]
    pub default_model: Option<String>,
    /// How often the model path is checked for a new file, in milliseconds (0: never).
    pub poll_interval_ms: u64,
    /// Threads of the prediction pool for batches (0: one per core).
    pub pool_threads: usize,
    /// Where single predictions run (docs/decisions/0011-inline-single-predictions.md gives the
    /// measurements behind the default, `inline`).
    pub single_predict: SinglePredict,
    /// How connections are spread over threads (`shared` or `per_core`).
    pub runtime: Runtime,
    /// The largest request body, in bytes.
    pub body_limit_bytes: usize,
    /// The most instances in one batch request.
    pub max_batch: usize,
    /// The largest `k` a request may ask for.
    pub max_k: usize,
    /// The `k` of a request that gives none.
    pub default_k: usize,
    /// The beam width of a request that gives none (`None`: the model's).
    pub beam: Option<usize>,
    /// The most time a request may take, in milliseconds.
    pub request_timeout_ms: u64,
    /// How long shutdown waits for in-flight requests, in milliseconds.
    pub shutdown_timeout_ms: u64,
    /// A connection that starts no request for this long is closed (an idle keep-alive
    /// connection, or a client too slow to finish its headers), in milliseconds (0: never).
    /// More than `request_timeout_ms`, so no request in progress is cut off.
    pub idle_timeout_ms: u64,
    /// The bearer token of the admin routes; without one (or with empty text) they are off.
    #[serde(deserialize_with = "text_or_none")]
    pub admin_token: Option<String>,
    /// Log format.
    pub log_format: LogFormat,
    /// The nice value (0–19) of the thread that unmaps an old model, and of the thread that
    /// loads a new one when `load_idle` is off: the checksums, validation and pre-faulting of a
    /// swap then run on CPU that requests leave idle (Linux only).
    pub load_nice: i32,
    /// Whether the load thread runs under `SCHED_IDLE` (Linux), so that a core running only it
    /// counts as idle when a request thread wakes; `load_nice` applies when this is off or
    /// refused. Under a load that keeps every core busy, a swap then waits for idle time.
    pub load_idle: bool,
    /// What a load checks before it publishes (`checksums` or `full`).
    pub load_checks: LoadChecks,
    /// Give the heap's free pages back to the system once the process's anonymous memory has
    /// grown by this many MiB over its lowest and the allocator holds that much more free than
    /// after the last trim (0: never; glibc only). See [`crate::serve::heap`].
    pub heap_trim_mib: u64,
}

impl ServeConfig {
    /// The compiled-in defaults.
    pub fn defaults() -> Self {
        ServeConfig {
            bind: "127.0.0.1:8080".into(),
            metrics_bind: None,
            grpc_bind: None,
            model: PathBuf::from("models/default.xmcb"),
            repository: None,
            version_policy: "latest:1".into(),
            default_model: None,
            model_name: None,
            poll_interval_ms: 1000,
            pool_threads: 0,
            single_predict: SinglePredict::Inline,
            runtime: Runtime::Shared,
            body_limit_bytes: 1 << 20,
            max_batch: 256,
            max_k: 100,
            default_k: 5,
            beam: None,
            request_timeout_ms: 2000,
            shutdown_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            admin_token: None,
            log_format: LogFormat::Text,
            load_nice: 10,
            load_idle: true,
            load_checks: LoadChecks::Checksums,
            heap_trim_mib: 32,
        }
    }

    /// The keys, as in the TOML `[serve]` table, derived from the struct; the environment
    /// variable of `key` is `XMC_` + `key` in upper case.
    pub fn keys() -> Vec<String> {
        layers::leaf_keys(&layers::full_dict(&Self::defaults()))
    }

    /// Defaults, then `file`'s `[serve]` table, then the environment `env` (pairs of
    /// `XMC_KEY`, value; variables that name no key are left to other tools), then `flags`
    /// (pairs of key, value).
    pub fn load(
        file: Option<&Path>,
        env: &[(String, String)],
        flags: &[(&str, String)],
    ) -> Result<Self, ServeConfigError> {
        let defaults = Self::defaults();
        let dict = layers::full_dict(&defaults);
        let mut stack = Vec::new();
        if let Some(path) = file {
            stack.extend(file_layer(path, &dict)?);
        }
        for (var, value) in env {
            let Some(key) = var.strip_prefix("XMC_").map(str::to_ascii_lowercase) else {
                continue;
            };
            if dict.contains_key(&key) {
                stack.push(Layer::from_text(var.clone(), &key, value, &dict).map_err(refused)?);
            }
        }
        for (key, value) in flags {
            stack.push(text_layer(key, value, "command line", &dict)?);
        }
        let cfg = layers::extract(&defaults, &stack).map_err(refused)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The idle limit of a connection (`idle_timeout_ms`; `None`: none).
    pub fn idle(&self) -> Option<std::time::Duration> {
        (self.idle_timeout_ms > 0).then(|| std::time::Duration::from_millis(self.idle_timeout_ms))
    }

    /// Sets one key from its text, as a flag would (no validation of the whole).
    pub fn set(&mut self, key: &str, value: &str, source: &str) -> Result<(), ServeConfigError> {
        let layer = text_layer(key, value, source, &layers::full_dict(self))?;
        *self = layers::extract(self, &[layer]).map_err(refused)?;
        Ok(())
    }

    fn validate(&self) -> Result<(), ServeConfigError> {
        let bad = |key: &str, m: &str| {
            Err(ServeConfigError::BadValue {
                key: key.into(),
                source_name: "validation".into(),
                message: m.into(),
            })
        };
        if self.bind.parse::<std::net::SocketAddr>().is_err() {
            return bad("bind", "not an address like 127.0.0.1:8080");
        }
        if let Some(m) = &self.metrics_bind {
            if m.parse::<std::net::SocketAddr>().is_err() {
                return bad("metrics_bind", "not an address like 127.0.0.1:9090");
            }
        }
        if let Some(g) = &self.grpc_bind {
            if g.parse::<std::net::SocketAddr>().is_err() {
                return bad("grpc_bind", "not an address like 127.0.0.1:8081");
            }
        }
        if let Some(n) = &self.model_name {
            if !valid_name(n) {
                return bad(
                    "model_name",
                    "not a model name (ASCII letters, digits, '-', '_' and '.', not starting with '.')",
                );
            }
        }
        if let Err(m) = self.version_policy.parse::<VersionPolicy>() {
            return bad("version_policy", &m);
        }
        if self.max_k == 0 || self.default_k == 0 || self.default_k > self.max_k {
            return bad("default_k", "must be between 1 and max_k");
        }
        if self.max_batch == 0 || self.body_limit_bytes == 0 || self.request_timeout_ms == 0 {
            return bad(
                "max_batch",
                "max_batch, body_limit_bytes and request_timeout_ms must be > 0",
            );
        }
        if self.beam == Some(0) {
            return bad("beam", "must be at least 1");
        }
        if !(0..=19).contains(&self.load_nice) {
            let n = self.load_nice;
            return bad(
                "load_nice",
                &format!("`{n}` is not a nice value from 0 to 19"),
            );
        }
        if self.heap_trim_mib > 1_048_576 {
            let n = self.heap_trim_mib;
            return bad("heap_trim_mib", &format!("`{n}` MiB is more than 1 TiB"));
        }
        if self.runtime == Runtime::PerCore && !cfg!(unix) {
            return bad("runtime", "`per_core` needs SO_REUSEPORT (Unix)");
        }
        if self.idle_timeout_ms != 0 && self.idle_timeout_ms <= self.request_timeout_ms {
            return bad(
                "idle_timeout_ms",
                "must be 0 (no limit) or more than request_timeout_ms",
            );
        }
        Ok(())
    }
}

/// Which versions of a repository model serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionPolicy {
    /// The `n` highest versions that load.
    Latest(usize),
    /// Every version that loads.
    All,
    /// These versions, those of them that load.
    Specific(Vec<u64>),
}

impl std::str::FromStr for VersionPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s == "all" {
            return Ok(VersionPolicy::All);
        }
        if let Some(n) = s.strip_prefix("latest:") {
            return match n.trim().parse::<usize>() {
                Ok(n) if n > 0 => Ok(VersionPolicy::Latest(n)),
                _ => Err(format!("`{s}`: latest:N needs N of at least 1")),
            };
        }
        if let Some(list) = s.strip_prefix("specific:") {
            let versions = list
                .split(',')
                .map(|v| match v.trim().parse::<u64>() {
                    Ok(v) if v > 0 => Ok(v),
                    _ => Err(format!("`{s}`: `{v}` is not a positive version")),
                })
                .collect::<Result<Vec<u64>, String>>()?;
            return Ok(VersionPolicy::Specific(versions));
        }
        Err(format!(
            "`{s}` is not latest:N, all, or specific:V,V,... (versions positive integers)"
        ))
    }
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self::defaults()
    }
}

/// The `[serve]` table of the file at `path` as a layer (`None` without one); other tables are
/// left to other commands.
fn file_layer(path: &Path, defaults: &Dict) -> Result<Option<Layer>, ServeConfigError> {
    let name = path.display().to_string();
    let file_error = |message: String| ServeConfigError::File {
        path: name.clone(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file_error(e.to_string()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| file_error(e.to_string()))?;
    let Some(serve) = table.get("serve") else {
        return Ok(None);
    };
    if !serve.is_table() {
        return Err(file_error("`serve` must be a table".into()));
    }
    Layer::from_toml(name.clone(), serve, defaults)
        .map(Some)
        .map_err(refused)
}

/// One key set from its text (a flag, or [`ServeConfig::set`]); the key must be known.
fn text_layer(
    key: &str,
    value: &str,
    source: &str,
    defaults: &Dict,
) -> Result<Layer, ServeConfigError> {
    if !defaults.contains_key(key) {
        return Err(ServeConfigError::UnknownKey {
            key: key.to_string(),
            source_name: source.to_string(),
            known: ServeConfig::keys().join(", "),
        });
    }
    Layer::from_text(source.to_string(), key, value, defaults).map_err(refused)
}

/// A refusal of the layering as a [`ServeConfigError`].
fn refused(r: Refusal) -> ServeConfigError {
    if r.unknown {
        ServeConfigError::UnknownKey {
            key: r.key,
            source_name: r.source,
            known: ServeConfig::keys().join(", "),
        }
    } else {
        ServeConfigError::BadValue {
            key: r.key,
            source_name: r.source,
            message: r.message,
        }
    }
}

/// An optional text setting: empty text is none, and a number or boolean is taken as its text
/// (an environment variable's `12345` is a token, not a number).
fn text_or_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        S(String),
        I(i64),
        U(u64),
        F(f64),
        B(bool),
    }
    Ok(match Option::<Text>::deserialize(d)? {
        None => None,
        Some(Text::S(s)) => (!s.is_empty()).then_some(s),
        Some(Text::I(i)) => Some(i.to_string()),
        Some(Text::U(u)) => Some(u.to_string()),
        Some(Text::F(f)) => Some(f.to_string()),
        Some(Text::B(b)) => Some(b.to_string()),
    })
}

/// A model name fit for a URL path segment: ASCII letters, digits, `-`, `_` and `.`, not
/// starting with a dot.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_apply_in_order_and_errors_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("server.toml");
        std::fs::write(&f, "[serve]\nmax_k = 50\nbind = \"127.0.0.1:9000\"\n").unwrap();
        let env = vec![("XMC_MAX_K".to_string(), "40".to_string())];
        let cfg = ServeConfig::load(Some(&f), &env, &[("bind", "127.0.0.1:9100".into())]).unwrap();
        assert_eq!((cfg.max_k, cfg.bind.as_str()), (40, "127.0.0.1:9100"));
        std::fs::write(&f, "[serve]\nmax_kk = 5\n").unwrap();
        let err = ServeConfig::load(Some(&f), &[], &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_kk"), "{err}");
        let env = vec![("XMC_MAX_BATCH".to_string(), "lots".to_string())];
        let err = ServeConfig::load(None, &env, &[]).unwrap_err().to_string();
        assert!(
            err.contains("max_batch") && err.contains("XMC_MAX_BATCH"),
            "{err}"
        );
        let err = ServeConfig::load(None, &[], &[("bind", "nowhere".into())]).unwrap_err();
        assert!(err.to_string().contains("bind"), "{err}");
    }

    #[test]
    fn version_policies_parse_and_bad_ones_name_the_key() {
        assert_eq!("latest:2".parse(), Ok(VersionPolicy::Latest(2)));
        assert_eq!("all".parse(), Ok(VersionPolicy::All));
        assert_eq!(
            "specific:1, 3".parse(),
            Ok(VersionPolicy::Specific(vec![1, 3]))
        );
        for bad in ["latest:0", "latest", "specific:0", "specific:", "newest"] {
            assert!(bad.parse::<VersionPolicy>().is_err(), "{bad}");
            let env = vec![("XMC_VERSION_POLICY".to_string(), bad.to_string())];
            let err = ServeConfig::load(None, &env, &[]).unwrap_err().to_string();
            assert!(err.contains("version_policy"), "{err}");
        }
    }

    #[test]
    fn model_name_must_be_a_url_segment() {
        let env = vec![("XMC_MODEL_NAME".to_string(), "tags-en".to_string())];
        let cfg = ServeConfig::load(None, &env, &[]).unwrap();
        assert_eq!(cfg.model_name.as_deref(), Some("tags-en"));
        for bad in ["a/b", ".hidden", "two words"] {
            let env = vec![("XMC_MODEL_NAME".to_string(), bad.to_string())];
            let err = ServeConfig::load(None, &env, &[]).unwrap_err().to_string();
            assert!(err.contains("model_name"), "{bad}: {err}");
        }
    }

    #[test]
    fn load_checks_are_checksums_by_default_or_full() {
        let cfg = ServeConfig::load(None, &[], &[]).unwrap();
        assert_eq!(cfg.load_checks, LoadChecks::Checksums);
        let env = vec![("XMC_LOAD_CHECKS".to_string(), "full".to_string())];
        let cfg = ServeConfig::load(None, &env, &[]).unwrap();
        assert_eq!(cfg.load_checks, LoadChecks::Full);
        let err = ServeConfig::load(None, &[], &[("load_checks", "some".into())]).unwrap_err();
        assert!(err.to_string().contains("load_checks"), "{err}");
    }

    #[test]
    fn runtime_is_shared_by_default_or_per_core() {
        assert_eq!(
            ServeConfig::load(None, &[], &[]).unwrap().runtime,
            Runtime::Shared
        );
        let env = vec![("XMC_RUNTIME".to_string(), "per_core".to_string())];
        let cfg = ServeConfig::load(None, &env, &[]).unwrap();
        assert_eq!(cfg.runtime, Runtime::PerCore);
        let err = ServeConfig::load(None, &[], &[("runtime", "threads".into())]).unwrap_err();
        assert!(err.to_string().contains("runtime"), "{err}");
    }

    #[test]
    fn heap_trim_is_32_mib_by_default_and_0_turns_it_off() {
        assert_eq!(ServeConfig::load(None, &[], &[]).unwrap().heap_trim_mib, 32);
        let env = vec![("XMC_HEAP_TRIM_MIB".to_string(), "0".to_string())];
        assert_eq!(ServeConfig::load(None, &env, &[]).unwrap().heap_trim_mib, 0);
        for bad in ["-1", "lots", "2000000"] {
            let env = vec![("XMC_HEAP_TRIM_MIB".to_string(), bad.to_string())];
            let err = ServeConfig::load(None, &env, &[]).unwrap_err().to_string();
            assert!(err.contains("heap_trim_mib") && err.contains(bad), "{err}");
        }
    }

    #[test]
    fn idle_timeout_is_a_minute_by_default_0_or_more_than_the_request_timeout() {
        assert_eq!(
            ServeConfig::load(None, &[], &[]).unwrap().idle_timeout_ms,
            60_000
        );
        let env = vec![("XMC_IDLE_TIMEOUT_MS".to_string(), "0".to_string())];
        assert_eq!(
            ServeConfig::load(None, &env, &[]).unwrap().idle_timeout_ms,
            0
        );
        let env = vec![("XMC_IDLE_TIMEOUT_MS".to_string(), "2500".to_string())];
        assert_eq!(
            ServeConfig::load(None, &env, &[]).unwrap().idle_timeout_ms,
            2500
        );
        // Not above the request timeout (2000 by default), and not a number.
        for bad in ["2000", "100", "soon"] {
            let env = vec![("XMC_IDLE_TIMEOUT_MS".to_string(), bad.to_string())];
            let err = ServeConfig::load(None, &env, &[]).unwrap_err().to_string();
            assert!(err.contains("idle_timeout_ms"), "{err}");
        }
    }

    #[test]
    fn load_idle_is_a_toml_bool_or_true_false_text() {
        assert!(ServeConfig::load(None, &[], &[]).unwrap().load_idle);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("server.toml");
        std::fs::write(&f, "[serve]\nload_idle = false\n").unwrap();
        assert!(!ServeConfig::load(Some(&f), &[], &[]).unwrap().load_idle);
        let env = vec![("XMC_LOAD_IDLE".to_string(), "true".to_string())];
        assert!(ServeConfig::load(Some(&f), &env, &[]).unwrap().load_idle);
        let env = vec![("XMC_LOAD_IDLE".to_string(), "yes".to_string())];
        let err = ServeConfig::load(None, &env, &[]).unwrap_err().to_string();
        assert!(err.contains("load_idle") && err.contains("`yes`"), "{err}");
    }
}
