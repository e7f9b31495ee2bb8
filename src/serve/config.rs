//! Server configuration in layers: compiled-in defaults, then the `[serve]` table of a TOML file,
//! then `XMC_*` environment variables, then command-line flags. Every error names its key.

use std::collections::BTreeMap;
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
    #[error("unknown server setting `{key}` (known: {known})")]
    UnknownKey {
        /// The key as written.
        key: String,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Where a single prediction (`POST /v1/predict`) runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinglePredict {
    /// On the async worker that parsed the request, with a thread-local scratch.
    Inline,
    /// Handed to the prediction pool, as batches are, and awaited.
    Pool,
}

/// How the API's connections are spread over threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// One multi-threaded tokio runtime, one worker per core, sharing work by stealing.
    Shared,
    /// One single-threaded runtime per core, each accepting on a listener of its own
    /// (`SO_REUSEPORT`, so the kernel spreads connections over them): a connection stays on one
    /// thread, and no worker wakes another to share its work (Unix only).
    PerCore,
}

/// What a model load checks before the model is published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Clone, Debug, PartialEq)]
pub struct ServeConfig {
    /// The address the API listens on.
    pub bind: String,
    /// A separate address for `/metrics`; `None` serves it on the API port.
    pub metrics_bind: Option<String>,
    /// The model bundle (a file or a symlink to one).
    pub model: PathBuf,
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
    /// The bearer token of the admin routes; without one they are off.
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
            model: PathBuf::from("models/default.xmcb"),
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

    /// The keys, as in the TOML `[serve]` table; the environment variable of `key` is
    /// `XMC_` + `key` in upper case.
    pub const KEYS: &'static [&'static str] = &[
        "bind",
        "metrics_bind",
        "model",
        "poll_interval_ms",
        "pool_threads",
        "single_predict",
        "runtime",
        "body_limit_bytes",
        "max_batch",
        "max_k",
        "default_k",
        "beam",
        "request_timeout_ms",
        "shutdown_timeout_ms",
        "idle_timeout_ms",
        "admin_token",
        "log_format",
        "load_nice",
        "load_idle",
        "load_checks",
        "heap_trim_mib",
    ];

    /// Defaults, then `file`'s `[serve]` table, then the environment `env` (pairs of
    /// `XMC_KEY`, value), then `flags` (pairs of key, value).
    pub fn load(
        file: Option<&Path>,
        env: &[(String, String)],
        flags: &[(&str, String)],
    ) -> Result<Self, ServeConfigError> {
        let mut cfg = Self::defaults();
        if let Some(path) = file {
            let name = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| ServeConfigError::File {
                path: name.clone(),
                message: e.to_string(),
            })?;
            let table: toml::Table =
                text.parse()
                    .map_err(|e: toml::de::Error| ServeConfigError::File {
                        path: name.clone(),
                        message: e.to_string(),
                    })?;
            if let Some(serve) = table.get("serve") {
                let serve = serve.as_table().ok_or_else(|| ServeConfigError::File {
                    path: name.clone(),
                    message: "`serve` must be a table".into(),
                })?;
                let values: BTreeMap<&String, &toml::Value> = serve.iter().collect();
                for (key, value) in values {
                    let text = match value {
                        toml::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    cfg.set(key, &text, &name)?;
                }
            }
        }
        for (var, value) in env {
            if let Some(key) = var.strip_prefix("XMC_") {
                let key = key.to_ascii_lowercase();
                cfg.set(&key, value, var)?;
            }
        }
        for (key, value) in flags {
            cfg.set(key, value, "command line")?;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// The idle limit of a connection (`idle_timeout_ms`; `None`: none).
    pub fn idle(&self) -> Option<std::time::Duration> {
        (self.idle_timeout_ms > 0).then(|| std::time::Duration::from_millis(self.idle_timeout_ms))
    }

    /// Sets one key from its text.
    pub fn set(&mut self, key: &str, value: &str, source: &str) -> Result<(), ServeConfigError> {
        let bad = |m: String| ServeConfigError::BadValue {
            key: key.to_string(),
            source_name: source.to_string(),
            message: m,
        };
        let num = |v: &str| -> Result<u64, ServeConfigError> {
            v.trim()
                .parse::<u64>()
                .map_err(|_| bad(format!("`{v}` is not a non-negative integer")))
        };
        match key {
            "bind" => self.bind = value.to_string(),
            "metrics_bind" => {
                self.metrics_bind = (!value.is_empty()).then(|| value.to_string());
            }
            "model" => self.model = PathBuf::from(value),
            "poll_interval_ms" => self.poll_interval_ms = num(value)?,
            "pool_threads" => self.pool_threads = num(value)? as usize,
            "body_limit_bytes" => self.body_limit_bytes = num(value)? as usize,
            "max_batch" => self.max_batch = num(value)? as usize,
            "max_k" => self.max_k = num(value)? as usize,
            "default_k" => self.default_k = num(value)? as usize,
            "beam" => self.beam = Some(num(value)? as usize),
            "request_timeout_ms" => self.request_timeout_ms = num(value)?,
            "shutdown_timeout_ms" => self.shutdown_timeout_ms = num(value)?,
            "idle_timeout_ms" => self.idle_timeout_ms = num(value)?,
            "heap_trim_mib" => match num(value)? {
                n @ 0..=1_048_576 => self.heap_trim_mib = n,
                n => return Err(bad(format!("`{n}` MiB is more than 1 TiB"))),
            },
            "admin_token" => self.admin_token = (!value.is_empty()).then(|| value.to_string()),
            "load_nice" => match num(value)? {
                n @ 0..=19 => self.load_nice = n as i32,
                n => return Err(bad(format!("`{n}` is not a nice value from 0 to 19"))),
            },
            "load_idle" => {
                self.load_idle = match value {
                    "true" => true,
                    "false" => false,
                    other => return Err(bad(format!("`{other}` is not `true` or `false`"))),
                }
            }
            "load_checks" => {
                self.load_checks = match value {
                    "checksums" => LoadChecks::Checksums,
                    "full" => LoadChecks::Full,
                    other => return Err(bad(format!("`{other}` is not `checksums` or `full`"))),
                }
            }
            "single_predict" => {
                self.single_predict = match value {
                    "inline" => SinglePredict::Inline,
                    "pool" => SinglePredict::Pool,
                    other => return Err(bad(format!("`{other}` is not `inline` or `pool`"))),
                }
            }
            "runtime" => {
                self.runtime = match value {
                    "shared" => Runtime::Shared,
                    "per_core" if cfg!(unix) => Runtime::PerCore,
                    "per_core" => {
                        return Err(bad("`per_core` needs SO_REUSEPORT (Unix)".to_string()));
                    }
                    other => return Err(bad(format!("`{other}` is not `shared` or `per_core`"))),
                }
            }
            "log_format" => {
                self.log_format = match value {
                    "text" => LogFormat::Text,
                    "json" => LogFormat::Json,
                    other => return Err(bad(format!("`{other}` is not `text` or `json`"))),
                }
            }
            _ => {
                // Environment variables of other tools may share the prefix; only keys given
                // in a file or on the command line must be known.
                if source.starts_with("XMC_") {
                    return Ok(());
                }
                return Err(ServeConfigError::UnknownKey {
                    key: key.to_string(),
                    known: Self::KEYS.join(", "),
                });
            }
        }
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
        if self.idle_timeout_ms != 0 && self.idle_timeout_ms <= self.request_timeout_ms {
            return bad(
                "idle_timeout_ms",
                "must be 0 (no limit) or more than request_timeout_ms",
            );
        }
        Ok(())
    }
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
