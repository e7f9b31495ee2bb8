//! The model repository: every model the server serves, each with the versions its policy picks.
//!
//! `xmc serve --repository DIR` serves `DIR/<name>/<version>/model.xmcb` (Triton's layout,
//! versions positive integers); `--model FILE` is a repository of one model, named after the
//! file's stem, at version 1. What serves is one immutable [`Snapshot`] behind an `ArcSwap`: a
//! request loads it once and looks its model up in a map, and a load publishes a new snapshot
//! with `rcu`, replacing only its own model's entry. Each model loads on its own (the models of
//! one scan load side by side): a version is opened, checked, warmed and then published, and a
//! version that fails is refused, counted under its model's name, and leaves every other model
//! and that model's serving versions as they were. A version that leaves the snapshot is
//! released on the release thread once its last request ends.

use super::config::VersionPolicy;
pub use super::config::valid_name;
use super::reload::{
    FileSig, LoadPriority, Loaded, ReloadOutcome, SpareRequest, Trigger, VersionMetrics,
    in_background, open_and_warm, release_in_background, unix_now,
};
use super::{AppState, ServeConfig};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The file of one version inside its directory.
pub const BUNDLE_FILE: &str = "model.xmcb";
/// A model's own settings inside its directory (`version_policy = "..."`).
pub const MODEL_SETTINGS: &str = "model.toml";

/// What serves now: each known model's loaded versions, lowest first (a model whose directory
/// exists but has none loaded is known, not ready), and the `/v1` routes' default model.
#[derive(Debug, Default)]
pub struct Snapshot {
    models: HashMap<String, Vec<Arc<Loaded>>>,
    default: Option<Arc<Loaded>>,
}

/// Why a model lookup found nothing to answer with.
#[derive(Debug, PartialEq, Eq)]
pub enum Missing {
    /// No model has this name.
    Model,
    /// The model has no such version serving.
    Version,
    /// The model has no version serving at all.
    NotReady,
}

impl Snapshot {
    fn new(models: HashMap<String, Vec<Arc<Loaded>>>, default_name: Option<&str>) -> Snapshot {
        let name = default_name.map(str::to_string).or_else(|| {
            let mut names: Vec<&String> = models
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(n, _)| n)
                .collect();
            names.sort();
            names.first().map(|n| n.to_string())
        });
        let default = name
            .and_then(|n| models.get(&n))
            .and_then(|v| v.last())
            .cloned();
        Snapshot { models, default }
    }

    /// The default model's highest serving version (what `/v1/predict` answers with).
    pub fn default_model(&self) -> Option<&Arc<Loaded>> {
        self.default.as_ref()
    }

    /// The model `name` at `version`, or at its highest serving version.
    pub fn get(&self, name: &str, version: Option<u64>) -> Result<&Arc<Loaded>, Missing> {
        let versions = self.models.get(name).ok_or(Missing::Model)?;
        match version {
            None => versions.last().ok_or(Missing::NotReady),
            Some(v) => versions
                .iter()
                .find(|l| l.version == v)
                .ok_or(Missing::Version),
        }
    }

    /// The versions of `name` that serve, lowest first (`None`: no such model).
    pub fn versions(&self, name: &str) -> Option<&[Arc<Loaded>]> {
        self.models.get(name).map(Vec::as_slice)
    }

    /// Every known model's name, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.models.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// Every serving version of every model.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Loaded>> {
        self.models.values().flatten()
    }

    /// Whether every known model has a version serving (and there is one).
    pub fn all_ready(&self) -> bool {
        !self.models.is_empty() && self.models.values().all(|v| !v.is_empty())
    }

    /// Whether any model has a version serving.
    pub fn any_serving(&self) -> bool {
        self.models.values().any(|v| !v.is_empty())
    }
}

/// Where the models come from.
#[derive(Clone, Debug)]
enum Layout {
    /// One bundle file (or symlink), served as model `name` version 1.
    File { name: String, path: PathBuf },
    /// A repository directory.
    Dir(PathBuf),
}

fn layout(cfg: &ServeConfig) -> Layout {
    match &cfg.repository {
        Some(dir) => Layout::Dir(PathBuf::from(dir)),
        None => Layout::File {
            name: single_model_name(cfg),
            path: cfg.model.clone(),
        },
    }
}

/// The name `--model FILE` serves under: `model_name`, or else the file's stem.
pub fn single_model_name(cfg: &ServeConfig) -> String {
    cfg.model_name
        .clone()
        .unwrap_or_else(|| file_model_name(&cfg.model))
}

/// A bundle file's model name: the file's stem (`models/default.xmcb` is `default`).
pub fn file_model_name(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| valid_name(s))
        .unwrap_or("default")
        .to_string()
}

/// A version directory's number: a positive integer written without leading zeros.
fn version_of(dir_name: &str) -> Option<u64> {
    let v: u64 = dir_name.parse().ok()?;
    (v > 0 && v.to_string() == dir_name).then_some(v)
}

/// One model as found on disk: its policy (or why its settings were refused) and every version
/// directory holding a bundle, lowest first.
struct Listed {
    name: String,
    policy: Result<VersionPolicy, String>,
    versions: Vec<(u64, PathBuf)>,
}

/// The models under `dir`. Entries that are not model directories (files, hidden or oddly
/// named directories) are skipped.
fn list_repository(dir: &Path, default_policy: &VersionPolicy) -> std::io::Result<Vec<Listed>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let path = entry.path();
        if !valid_name(&name) || !path.is_dir() {
            continue;
        }
        let policy = model_policy(&path, default_policy);
        let mut versions = Vec::new();
        if let Ok(dirs) = std::fs::read_dir(&path) {
            for v in dirs.flatten() {
                let bundle = v.path().join(BUNDLE_FILE);
                if let Some(version) = v.file_name().to_str().and_then(version_of) {
                    if bundle.exists() {
                        versions.push((version, bundle));
                    }
                }
            }
        }
        versions.sort_by_key(|(v, _)| *v);
        out.push(Listed {
            name,
            policy,
            versions,
        });
    }
    Ok(out)
}

/// A model directory's policy: its `model.toml`'s `version_policy`, else the server's.
fn model_policy(dir: &Path, default: &VersionPolicy) -> Result<VersionPolicy, String> {
    let file = dir.join(MODEL_SETTINGS);
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(default.clone()),
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| format!("{}: {e}", file.display()))?;
    let mut policy = default.clone();
    for (key, value) in &table {
        match (key.as_str(), value.as_str()) {
            ("version_policy", Some(p)) => {
                policy = p
                    .parse()
                    .map_err(|m| format!("{}: version_policy: {m}", file.display()))?;
            }
            ("version_policy", None) => {
                return Err(format!(
                    "{}: version_policy must be a string",
                    file.display()
                ));
            }
            (other, _) => {
                return Err(format!(
                    "{}: unknown key `{other}` (known: version_policy)",
                    file.display()
                ));
            }
        }
    }
    Ok(policy)
}

/// Files that failed to load, by model and version, with why, so the poller does not retry one.
pub(crate) type Failed = HashMap<(String, u64), (FileSig, String)>;

/// What the loader keeps between scans, under one lock: the files that failed, and the models
/// an operator unloaded (`POST /v2/repository/models/{name}/unload`), which no scan loads until
/// an explicit load of that model.
#[derive(Debug, Default)]
pub(crate) struct Book {
    failed: Failed,
    unloaded: HashSet<String>,
}

/// Why an explicit load or unload of one model did not happen.
#[derive(Debug, PartialEq, Eq)]
pub enum ModelLoadError {
    /// No model directory (or `--model` file) has this name.
    NoSuchModel,
    /// The model's versions (or its settings) were refused; what served keeps serving.
    Refused(String),
}

/// The models on disk, or why they cannot be listed.
fn listing(state: &AppState) -> Result<Vec<Listed>, String> {
    match layout(&state.cfg) {
        Layout::File { name, path } => {
            std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(vec![Listed {
                name,
                policy: Ok(VersionPolicy::All),
                versions: vec![(1, path)],
            }])
        }
        Layout::Dir(dir) => {
            list_repository(&dir, &state.policy).map_err(|e| format!("{}: {e}", dir.display()))
        }
    }
}

/// What one model's load did.
#[derive(Default)]
struct ModelOutcome {
    /// The bundle versions (`meta.version`) of the versions it published.
    published: Vec<String>,
    /// Why versions (or the model's settings) were refused.
    errors: Vec<String>,
}

/// Loads what changed in every model (or, with [`Trigger::Force`], everything) and publishes
/// it model by model. Models load side by side; each one's failures leave the others alone.
/// Returns the error messages joined when anything failed, else what was published.
pub async fn load_now(state: &Arc<AppState>, trigger: Trigger) -> Result<ReloadOutcome, String> {
    let explicit = trigger != Trigger::Poll;
    let mut book = state.reload_lock.lock().await;
    let mut listed = match listing(state) {
        Ok(l) => l,
        // Between an unlink and a rename the path may briefly not exist: the poller looks
        // again next time; an explicit load reports it.
        Err(e) if !explicit => {
            tracing::debug!(error = %e, "model path or repository not readable; will look again");
            return Ok(ReloadOutcome::Unchanged);
        }
        Err(e) => {
            let model = match layout(&state.cfg) {
                Layout::File { name, .. } => name,
                Layout::Dir(_) => String::new(),
            };
            record_failure(state, &model, e.clone());
            return Err(e);
        }
    };
    listed.retain(|l| !book.unloaded.contains(&l.name));
    // Models whose directory went away leave the snapshot.
    let present: Vec<&str> = listed.iter().map(|l| l.name.as_str()).collect();
    let gone: Vec<String> = state
        .repo
        .load()
        .names()
        .into_iter()
        .filter(|n| !present.contains(n))
        .map(str::to_string)
        .collect();
    for name in gone {
        publish(state, &name, None);
    }
    let out = load_models(state, listed, trigger, &mut book.failed).await;
    if !out.errors.is_empty() {
        return Err(out.errors.join("; "));
    }
    let serving = state.repo.load();
    Ok(match (out.published.last(), serving.default_model()) {
        (None, _) => ReloadOutcome::Unchanged,
        (Some(last), default) => ReloadOutcome::Loaded(
            default
                .map(|d| d.model.meta().version.clone())
                .filter(|v| out.published.contains(v))
                .unwrap_or_else(|| last.clone()),
        ),
    })
}

/// Loads `listed`'s models side by side, each with its own failures, and merges what failed
/// into `failed`.
async fn load_models(
    state: &Arc<AppState>,
    listed: Vec<Listed>,
    trigger: Trigger,
    failed: &mut Failed,
) -> ModelOutcome {
    let loads = listed.into_iter().map(|l| {
        let mut mine: Failed = failed
            .iter()
            .filter(|((n, _), _)| *n == l.name)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        async move {
            let out = load_model(state, &l, trigger, &mut mine).await;
            (l.name, mine, out)
        }
    });
    let results = futures_util::future::join_all(loads).await;
    let mut all = ModelOutcome::default();
    for (name, mine, out) in results {
        failed.retain(|(n, _), _| *n != name);
        failed.extend(mine);
        all.published.extend(out.published);
        all.errors.extend(out.errors);
    }
    all
}

/// `POST /v2/repository/models/{name}/load`: loads model `name` now (a version that failed is
/// tried again), and lets scans load it again if it was unloaded. Other models are left alone.
pub async fn load_one(state: &Arc<AppState>, name: &str) -> Result<(), ModelLoadError> {
    let mut book = state.reload_lock.lock().await;
    let listed = listing(state)
        .map_err(ModelLoadError::Refused)?
        .into_iter()
        .find(|l| l.name == name)
        .ok_or(ModelLoadError::NoSuchModel)?;
    book.unloaded.remove(name);
    let out = load_models(state, vec![listed], Trigger::Explicit, &mut book.failed).await;
    if !out.errors.is_empty() {
        return Err(ModelLoadError::Refused(out.errors.join("; ")));
    }
    if state.repo.load().get(name, None).is_err() {
        return Err(ModelLoadError::Refused(format!(
            "model {name:?} has no version its version policy picks"
        )));
    }
    Ok(())
}

/// `POST /v2/repository/models/{name}/unload`: takes model `name` out of what serves (its
/// versions are released once their in-flight requests end), and keeps scans from loading it
/// again until [`load_one`].
pub async fn unload_one(state: &Arc<AppState>, name: &str) -> Result<(), ModelLoadError> {
    let mut book = state.reload_lock.lock().await;
    let on_disk = listing(state).is_ok_and(|l| l.iter().any(|m| m.name == name));
    if !on_disk && state.repo.load().versions(name).is_none() {
        return Err(ModelLoadError::NoSuchModel);
    }
    book.unloaded.insert(name.to_string());
    book.failed.retain(|(n, _), _| n != name);
    if state.repo.load().versions(name).is_some() {
        publish(state, name, None);
    }
    tracing::info!(model = %name, "model unloaded by request; scans leave it alone until a load");
    Ok(())
}

/// One row of `POST /v2/repository/index`: a model, or one version of it, with its state
/// (`READY` or `UNAVAILABLE`) and, when it is not ready, why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IndexEntry {
    /// The model's name.
    pub name: String,
    /// The version (absent on the row of a model without any version directory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `READY` or `UNAVAILABLE`.
    pub state: &'static str,
    /// Why it is not ready (empty when it is).
    pub reason: String,
}

/// Every model and version on disk, and every one that serves, with its state.
pub async fn index(state: &Arc<AppState>) -> Result<Vec<IndexEntry>, String> {
    let book = state.reload_lock.lock().await;
    let listed = listing(state)?;
    let snap = state.repo.load();
    let mut out = Vec::new();
    let row = |name: &str, version: Option<u64>, reason: String| IndexEntry {
        name: name.to_string(),
        version: version.map(|v| v.to_string()),
        state: if reason.is_empty() {
            "READY"
        } else {
            "UNAVAILABLE"
        },
        reason,
    };
    for l in &listed {
        if l.versions.is_empty() {
            out.push(row(
                &l.name,
                None,
                format!("no version directory holds a {BUNDLE_FILE}"),
            ));
        }
        let serving = snap.versions(&l.name).unwrap_or_default();
        for (v, _) in &l.versions {
            let reason = if serving.iter().any(|s| s.version == *v) {
                String::new()
            } else if book.unloaded.contains(&l.name) {
                "unloaded by request".to_string()
            } else if let Some((_, why)) = book.failed.get(&(l.name.clone(), *v)) {
                why.clone()
            } else if let Err(why) = &l.policy {
                why.clone()
            } else {
                "not picked by the version policy".to_string()
            };
            out.push(row(&l.name, Some(*v), reason));
        }
    }
    // A version that serves while its directory is gone (until the next scan) is listed too.
    for name in snap.names() {
        let on_disk = listed.iter().find(|l| l.name == name);
        for s in snap.versions(name).unwrap_or_default() {
            if !on_disk.is_some_and(|l| l.versions.iter().any(|(v, _)| *v == s.version)) {
                out.push(row(name, Some(s.version), String::new()));
            }
        }
    }
    out.sort_by(|a, b| {
        let v = |e: &IndexEntry| e.version.as_deref().and_then(|v| v.parse::<u64>().ok());
        (a.name.as_str(), v(a)).cmp(&(b.name.as_str(), v(b)))
    });
    Ok(out)
}

/// Loads the versions of one model its policy picks that are not serving yet (or that changed
/// on disk), keeps the serving ones that still qualify, and publishes the result if it differs.
/// A version that fails is refused; the version of the same number that served before keeps
/// serving, and a `latest:N` policy looks further down for versions that load.
async fn load_model(
    state: &Arc<AppState>,
    listed: &Listed,
    trigger: Trigger,
    failed: &mut Failed,
) -> ModelOutcome {
    let mut out = ModelOutcome::default();
    let name = &listed.name;
    let policy = match &listed.policy {
        Ok(p) => p.clone(),
        Err(msg) => {
            // Refused settings are reported once per scan that asks; the model keeps what it
            // serves.
            if trigger != Trigger::Poll {
                record_failure(state, name, msg.clone());
                out.errors.push(msg.clone());
            }
            return out;
        }
    };
    let serving: Vec<Arc<Loaded>> = state
        .repo
        .load()
        .versions(name)
        .map(<[_]>::to_vec)
        .unwrap_or_default();
    let (wanted, limit): (Vec<&(u64, PathBuf)>, usize) = match &policy {
        VersionPolicy::Latest(n) => (listed.versions.iter().rev().collect(), *n),
        VersionPolicy::All => (listed.versions.iter().rev().collect(), usize::MAX),
        VersionPolicy::Specific(list) => (
            listed
                .versions
                .iter()
                .rev()
                .filter(|(v, _)| list.contains(v))
                .collect(),
            usize::MAX,
        ),
    };
    let mut keep: Vec<Arc<Loaded>> = Vec::new();
    for (version, path) in wanted {
        if keep.len() >= limit {
            break;
        }
        let old = serving.iter().find(|l| l.version == *version);
        let sig = match FileSig::of(path) {
            Ok(s) => s,
            Err(_) => {
                // Gone between the listing and now: whatever served it goes on until the next
                // scan sees it gone.
                keep.extend(old.cloned());
                continue;
            }
        };
        let key = (name.clone(), *version);
        if let Some(old) = old {
            if old.sig == sig && trigger != Trigger::Force {
                keep.push(old.clone());
                continue;
            }
        }
        if trigger == Trigger::Poll && failed.get(&key).map(|f| f.0) == Some(sig) {
            keep.extend(old.cloned());
            continue;
        }
        match load_version(state, name, *version, path, sig).await {
            Ok(loaded) => {
                failed.remove(&key);
                out.published.push(loaded.model.meta().version.clone());
                keep.push(Arc::new(loaded));
            }
            Err(msg) => {
                failed.insert(key, (sig, msg.clone()));
                record_failure(state, name, msg.clone());
                out.errors.push(msg);
                keep.extend(old.cloned());
            }
        }
    }
    keep.sort_by_key(|l| l.version);
    let same =
        keep.len() == serving.len() && keep.iter().zip(&serving).all(|(a, b)| Arc::ptr_eq(a, b));
    if !same {
        publish(state, name, Some(keep));
    }
    out
}

/// Opens, checks and warms one version off the async threads.
async fn load_version(
    state: &Arc<AppState>,
    name: &str,
    version: u64,
    path: &Path,
    sig: FileSig,
) -> Result<Loaded, String> {
    let priority = LoadPriority {
        nice: state.cfg.load_nice,
        idle: state.cfg.load_idle,
    };
    let checks = state.cfg.load_checks;
    let spares = SpareRequest {
        floor: state.scratch_floor(),
        threads: state.predict_threads(),
    };
    let p = path.to_path_buf();
    let (model, times, scratch) =
        in_background(priority, move || open_and_warm(&p, checks, spares))
            .await
            .and_then(|r| r)?;
    tracing::info!(
        model = %name,
        version,
        bundle_version = %model.meta().version,
        path = %path.display(),
        open_ms = format_args!("{:.1}", times.open_ms),
        warm_ms = format_args!("{:.1}", times.warm_ms),
        spare_scratch = scratch.spares(),
        "model version loaded"
    );
    metrics::counter!("xmc_model_reloads_total", "result" => "ok").increment(1);
    if let Ok(mut s) = state.status.lock() {
        s.ok += 1;
        s.last_error = None;
    }
    Ok(Loaded {
        model,
        name: name.to_string(),
        version,
        path: path.to_path_buf(),
        sig,
        loaded_unix: unix_now(),
        scratch,
        metrics: VersionMetrics::new(name, version),
    })
}

/// Publishes `versions` as model `name`'s (`None`: the model is gone), then releases the
/// versions that left on the release thread and updates the gauges.
fn publish(state: &AppState, name: &str, versions: Option<Vec<Arc<Loaded>>>) {
    let default_name = state.default_name();
    let prev = state.repo.rcu(|snap| {
        let mut models = snap.models.clone();
        match &versions {
            Some(v) => {
                models.insert(name.to_string(), v.clone());
            }
            None => {
                models.remove(name);
            }
        }
        Snapshot::new(models, default_name.as_deref())
    });
    let now = state.repo.load();
    let kept = now.versions(name).unwrap_or_default();
    let before = prev.versions(name).unwrap_or_default();
    for l in kept {
        if !before.iter().any(|p| Arc::ptr_eq(p, l)) {
            // The line operators (and tests/deploy/live_sync.sh) time a rollout by: `version` is
            // the bundle's content version, as `GET /v1/model` reports it.
            tracing::info!(
                model = %name,
                repository_version = l.version,
                version = %l.model.meta().version,
                spare_scratch = l.scratch.spares(),
                "model published"
            );
        }
        metrics::gauge!("xmc_model_version_ready", "model" => name.to_string(), "version" => l.version.to_string()).set(1.0);
    }
    // The default model's gauge, `xmc_model_info{name,version}`, names the bundle serving /v1.
    let (was, is) = (prev.default_model(), now.default_model());
    if !matches!((was, is), (Some(a), Some(b)) if Arc::ptr_eq(a, b)) {
        if let Some(old) = was {
            let meta = old.model.meta();
            metrics::gauge!("xmc_model_info", "name" => meta.name.clone(), "version" => meta.version.clone()).set(0.0);
        }
        if let Some(new) = is {
            let meta = new.model.meta();
            metrics::gauge!("xmc_model_info", "name" => meta.name.clone(), "version" => meta.version.clone()).set(1.0);
        }
    }
    for old in prev.versions(name).unwrap_or_default() {
        if kept.iter().any(|k| Arc::ptr_eq(k, old)) {
            continue;
        }
        if !kept.iter().any(|k| k.version == old.version) {
            metrics::gauge!("xmc_model_version_ready", "model" => name.to_string(), "version" => old.version.to_string()).set(0.0);
        }
        tracing::info!(model = %name, version = old.version, "model version unpublished");
        release_in_background(old.clone(), state.cfg.load_nice, |l: &Loaded| {
            l.model.bundle().release_pages()
        });
    }
}

/// Counts and records a refused load of `model` (empty: the repository itself).
fn record_failure(state: &AppState, model: &str, msg: String) {
    metrics::counter!("xmc_model_reloads_total", "result" => "error").increment(1);
    metrics::counter!("xmc_model_load_failures_total", "model" => model.to_string()).increment(1);
    if let Ok(mut s) = state.status.lock() {
        s.errors += 1;
        s.last_error = Some(msg.clone());
        s.last_error_unix = Some(unix_now());
    }
    tracing::error!(model, error = %msg, "model load failed; what served keeps serving");
}

/// Checks the model path or repository every `poll_interval_ms` and loads what changed.
pub async fn poll(state: Arc<AppState>) {
    let every = Duration::from_millis(state.cfg.poll_interval_ms.max(10));
    loop {
        tokio::time::sleep(every).await;
        // Failures are recorded inside; a missing file between renames is retried next tick.
        let _ = load_now(&state, Trigger::Poll).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_positive_integers_without_leading_zeros() {
        assert_eq!(version_of("1"), Some(1));
        assert_eq!(version_of("20"), Some(20));
        for bad in ["0", "01", "-1", "1a", "", "v1"] {
            assert_eq!(version_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn model_names_fit_a_path_segment() {
        assert!(valid_name("debian-tags_2.x"));
        for bad in ["", ".hidden", "a b", "a/b", "é"] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert_eq!(file_model_name(Path::new("models/default.xmcb")), "default");
        assert_eq!(file_model_name(Path::new("/tmp/a b.xmcb")), "default");
    }

    #[test]
    fn a_model_toml_sets_its_policy_and_a_bad_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let all = VersionPolicy::All;
        assert_eq!(model_policy(dir.path(), &all), Ok(VersionPolicy::All));
        let f = dir.path().join(MODEL_SETTINGS);
        std::fs::write(&f, "version_policy = \"latest:2\"\n").unwrap();
        assert_eq!(model_policy(dir.path(), &all), Ok(VersionPolicy::Latest(2)));
        std::fs::write(&f, "version_policy = \"newest\"\n").unwrap();
        assert!(model_policy(dir.path(), &all).is_err());
        std::fs::write(&f, "versions = 2\n").unwrap();
        let err = model_policy(dir.path(), &all).unwrap_err();
        assert!(err.contains("unknown key `versions`"), "{err}");
    }
}
