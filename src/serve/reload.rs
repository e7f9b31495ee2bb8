//! Loading, validating, warming and publishing models; polling the model path.

use super::LoadChecks;
use crate::bundle::{Bundle, OpenOptions};
use crate::model::{Model, PredictOptions, Prediction, Scratch, ScratchSizes};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What identifies one version of the file at the model path: a renamed-into-place file or a
/// flipped symlink changes the inode; an in-place rewrite changes the size or the mtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileSig {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl FileSig {
    /// The signature of the file `path` resolves to (symlinks followed).
    pub fn of(path: &Path) -> std::io::Result<FileSig> {
        let m = std::fs::metadata(path)?;
        let mtime_ns = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as i128);
        #[cfg(unix)]
        let (dev, ino) = {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        };
        #[cfg(not(unix))]
        let (dev, ino) = (0, 0);
        Ok(FileSig {
            dev,
            ino,
            len: m.len(),
            mtime_ns,
        })
    }
}

/// A published model: one version of one repository model.
#[derive(Debug)]
pub struct Loaded {
    /// The model.
    pub model: Model,
    /// The repository model it serves as.
    pub name: String,
    /// Its version in the repository (1 for `--model FILE`).
    pub version: u64,
    /// The file it came from, and that file's signature.
    pub path: std::path::PathBuf,
    /// The signature of that file when it was opened.
    pub sig: FileSig,
    /// Its prediction metrics, labelled with `model` and `version` once here, so that a request
    /// records them without building a key.
    pub metrics: VersionMetrics,
    /// When it was published (Unix seconds).
    pub loaded_unix: u64,
    /// Scratch space the load made ready for it.
    pub scratch: ScratchPool,
}

/// The per-version prediction metrics.
#[derive(Debug)]
pub struct VersionMetrics {
    /// `xmc_predict_depth{model,version}`.
    pub depth: metrics::Histogram,
    /// `xmc_predict_nodes_evaluated{model,version}`.
    pub nodes: metrics::Histogram,
    /// `xmc_predictions_total{model,version}`: queries answered (a batch counts each).
    pub predictions: metrics::Counter,
}

impl VersionMetrics {
    /// The handles for `name`, `version`.
    pub fn new(name: &str, version: u64) -> VersionMetrics {
        let labels = [
            ("model", name.to_string()),
            ("version", version.to_string()),
        ];
        VersionMetrics {
            depth: metrics::histogram!("xmc_predict_depth", &labels),
            nodes: metrics::histogram!("xmc_predict_nodes_evaluated", &labels),
            predictions: metrics::counter!("xmc_predictions_total", &labels),
        }
    }
}

/// Scratch space sized for one model by its load thread, for the request threads whose own is
/// too small for it.
///
/// Each thread that predicts keeps scratch space of its own, and a prediction grows the parts
/// that a model's shape sets ([`ScratchSizes`]): the dense query vector alone is `n_features`
/// floats. Grown on the request path, those are new pages, faulted in one by one: after a swap
/// to a model with many more features, the first request on each worker took several times its
/// usual server time (docs/decisions/0009-per-thread-scratch.md). So when a model needs more
/// than the threads are known to have, the load thread fills (and so faults in) a spare for
/// every thread, and a thread that finds its own too small swaps it for one.
#[derive(Debug, Default)]
pub struct ScratchPool {
    /// What the load's warm-up grew its scratch space to: the model's need.
    pub sizes: ScratchSizes,
    spares: Mutex<Vec<Scratch>>,
    /// The request threads' old scratch space, swapped out for spares. It is freed with the
    /// model, on the release thread, not on the request path.
    retired: Mutex<Vec<Scratch>>,
}

impl ScratchPool {
    fn new(sizes: ScratchSizes, spares: Vec<Scratch>) -> ScratchPool {
        ScratchPool {
            sizes,
            retired: Mutex::new(Vec::with_capacity(spares.len())),
            spares: Mutex::new(spares),
        }
    }

    /// Swaps `scratch` for a spare when it is too small for the model and a spare is left;
    /// otherwise leaves it to grow as the prediction needs.
    pub fn fit(&self, scratch: &mut Scratch) {
        if scratch.sizes().covers(&self.sizes) {
            return;
        }
        let Some(mut spare) = self.spares.lock().ok().and_then(|mut s| s.pop()) else {
            return;
        };
        std::mem::swap(scratch, &mut spare);
        if let Ok(mut retired) = self.retired.lock() {
            retired.push(spare);
        }
    }

    /// How many spares are left.
    pub fn spares(&self) -> usize {
        self.spares.lock().map_or(0, |s| s.len())
    }
}

/// How many spares a load makes ready.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpareRequest {
    /// What every thread that predicts is known to have: a model within it needs none.
    pub floor: ScratchSizes,
    /// How many threads predict.
    pub threads: usize,
}

/// What a load attempt did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// A new model is serving, with this version.
    Loaded(String),
    /// The file is the one already serving (or the one that failed last); nothing was done.
    Unchanged,
}

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What a load spent, for the log line that publishes it.
#[derive(Clone, Copy, Debug)]
pub(super) struct LoadTimes {
    /// Opening, pre-faulting, and verifying every checksum and index.
    pub(super) open_ms: f64,
    /// The warm-up predictions, and filling any spare scratch space.
    pub(super) warm_ms: f64,
}

/// Opens, validates (every checksum, and the structure or everything, as `checks` says),
/// pre-faults and warms the bundle at `path`, and makes scratch space ready for it if it needs
/// more than `spares.floor`.
pub(super) fn open_and_warm(
    path: &Path,
    checks: LoadChecks,
    spares: SpareRequest,
) -> Result<(Model, LoadTimes, ScratchPool), String> {
    let start = Instant::now();
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let options = OpenOptions {
        verify_checksums: true,
        prefault: true,
        yield_between_steps: true,
    };
    let model = match checks {
        LoadChecks::Full => Model::open(path, &options).map_err(|e| err(&e))?,
        LoadChecks::Checksums => {
            let bundle = Bundle::open(path, &options).map_err(|e| err(&e))?;
            let model = Model::from_bundle_structure(bundle).map_err(|e| err(&e))?;
            // Label names parse on first use: here, not on the first request after the swap.
            // (No request uses feature names.)
            let _ = model.label_names();
            model
        }
    };
    let opened = Instant::now();
    // A few predictions touch the request path's code and the upper tree levels, so the first
    // real request after the swap is not the cold one.
    let mut scratch = Scratch::default();
    let mut out = Prediction::default();
    for q in 0..16u32 {
        model.bundle().step_done();
        let (idx, val) = warm_query(&model, q);
        // `warm_query` reduces the ids modulo the feature count, so this cannot fail; a failure
        // would only skip warming.
        let _ = model.predict_into(
            &idx,
            &val,
            &PredictOptions::default(),
            &mut scratch,
            &mut out,
        );
    }
    let sizes = scratch.sizes();
    let mut ready = Vec::new();
    if !spares.floor.covers(&sizes) && spares.threads > 0 {
        ready.reserve_exact(spares.threads);
        for _ in 1..spares.threads {
            model.bundle().step_done();
            // A copy writes every page of its buffers, so they are faulted in here.
            ready.push(scratch.clone());
        }
        ready.push(scratch);
    }
    let times = LoadTimes {
        open_ms: (opened - start).as_secs_f64() * 1e3,
        warm_ms: opened.elapsed().as_secs_f64() * 1e3,
    };
    Ok((model, times, ScratchPool::new(sizes, ready)))
}

/// The `q`th synthetic warm-up query for `model`: eight feature ids spread over its features
/// (reduced modulo their count), each of value 1.
pub(crate) fn warm_query(model: &Model, q: u32) -> (Vec<u32>, Vec<f32>) {
    let d = model.meta().n_features.max(1) as u32;
    let idx: Vec<u32> = (0..8).map(|j| (q * 7919 + j * 104_729) % d).collect();
    let val = vec![1.0f32; idx.len()];
    (idx, val)
}

/// Runs `work` on a thread of its own at low priority (see [`LoadPriority`]), so that a load's
/// CPU (checksums, validation, pre-faulting, warming) comes from what requests leave idle, and
/// waits for it without blocking the async workers. A panic in `work` is an error, not a crash.
pub(super) async fn in_background<T: Send + 'static>(
    priority: LoadPriority,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("xmc-load".into())
        .spawn(move || {
            lower_priority(priority);
            let _ = tx.send(work());
        })
        .map_err(|e| format!("could not start the load thread: {e}"))?;
    rx.await
        .map_err(|_| "the load thread ended without a result".to_string())
}

/// How far a background thread steps back for requests.
#[derive(Clone, Copy, Debug)]
pub(super) struct LoadPriority {
    /// The nice value (0–19).
    pub(super) nice: i32,
    /// Run under `SCHED_IDLE` instead (Linux): the scheduler counts a core that runs only such
    /// threads as idle when it places a waking thread, so a request thread takes that core at
    /// once. A nice value does not do that: with the load generator busy on the other core, a
    /// woken request thread waited behind the nice-19 load for a scheduler slice.
    pub(super) idle: bool,
}

/// Lowers the calling thread's priority (on Linux both calls apply to that thread alone). A
/// refusal only costs latency during swaps, so it is logged, not fatal.
fn lower_priority(p: LoadPriority) {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::{
            NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
            set_thread_priority_and_policy, thread_native_id,
        };
        if p.idle {
            let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
            match set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle) {
                Ok(()) => {
                    // A new thread starts at its spawner's priority, and the switch does not
                    // reschedule it: before this yield, the load thread's first slice often ran
                    // on to the next tick while woken request threads waited
                    // (docs/decisions/0010-loading-under-sched-idle.md).
                    std::thread::yield_now();
                    return;
                }
                Err(e) => tracing::warn!(error = ?e, "could not run the load thread as SCHED_IDLE"),
            }
        }
        if p.nice > 0 {
            let tid = rustix::thread::gettid();
            if let Err(e) = rustix::process::setpriority_process(Some(tid), p.nice) {
                tracing::warn!(error = %e, nice = p.nice, "could not lower the load thread's priority");
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = p;
}

/// Drops the unpublished model on a low-priority thread of its own once no request holds it.
///
/// Whoever drops the last reference unmaps the bundle: tens of milliseconds for a large model,
/// with TLB shootdowns on every core. Left to chance that would be a request (which then pays it
/// as latency) or an async worker (which stalls every request queued on it). The releaser keeps
/// one reference, so requests finishing on the old model only decrement a count, and polls until
/// it holds the last one.
///
/// `before_drop` runs on the last reference first: the server passes the bundle's
/// [`crate::bundle::Bundle::release_pages`], so that the unmap itself is short. This thread
/// runs at `nice`, never `SCHED_IDLE`: it takes the address-space lock, and a holder that any
/// request thread preempts would leave every thread that needs the lock waiting.
pub(super) fn release_in_background<T: Send + Sync + 'static>(
    old: Arc<T>,
    nice: i32,
    before_drop: impl FnOnce(&T) + Send + 'static,
) {
    let spawned = std::thread::Builder::new()
        .name("xmc-release".into())
        .spawn(move || {
            lower_priority(LoadPriority { nice, idle: false });
            let start = Instant::now();
            while Arc::strong_count(&old) > 1 {
                std::thread::sleep(RELEASE_POLL);
            }
            let held = start.elapsed();
            before_drop(&old);
            drop(old);
            tracing::info!(
                waited_us = held.as_micros() as u64,
                release_us = (start.elapsed() - held).as_micros() as u64,
                "released the old model"
            );
        });
    if let Err(e) = spawned {
        // The `old` moved into the failed closure is dropped here, as it would have been.
        tracing::warn!(error = %e, "could not start the release thread; unmapping inline");
    }
}

/// How often the release thread looks whether the last request on the old model ended.
pub(super) const RELEASE_POLL: Duration = Duration::from_millis(5);

/// How a load was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The poller: a missing path is retried quietly, and a file that failed is not retried.
    Poll,
    /// An explicit request: a missing path is an error, and a file that failed is tried again;
    /// the file serving now is left alone (a second map of the same bytes would only cost
    /// memory).
    Explicit,
    /// An explicit request to load the file even if it is the one serving.
    Force,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_model_is_released_once_its_last_request_ends() {
        let old = Arc::new(vec![7u8; 1024]);
        let watch = Arc::downgrade(&old);
        let request = Arc::clone(&old);
        release_in_background(old, 0, |_| {});
        std::thread::sleep(RELEASE_POLL * 4);
        assert!(
            watch.upgrade().is_some(),
            "released under a running request"
        );
        drop(request);
        let deadline = Instant::now() + Duration::from_secs(10);
        while watch.strong_count() > 0 {
            assert!(Instant::now() < deadline, "never released");
            std::thread::sleep(RELEASE_POLL);
        }
    }

    #[tokio::test]
    async fn loads_run_on_their_own_thread_at_the_configured_nice_value() {
        let (name, nice) = in_background(
            LoadPriority {
                nice: 7,
                idle: false,
            },
            || {
                let name = std::thread::current().name().map(str::to_string);
                #[cfg(target_os = "linux")]
                let nice =
                    rustix::process::getpriority_process(Some(rustix::thread::gettid())).ok();
                #[cfg(not(target_os = "linux"))]
                let nice = Some(7);
                (name, nice)
            },
        )
        .await
        .unwrap();
        assert_eq!(name.as_deref(), Some("xmc-load"));
        // A process already running at a higher nice value cannot go back down to 7.
        assert!(nice.is_some_and(|n| n >= 7), "{nice:?}");
        let p = LoadPriority {
            nice: 0,
            idle: false,
        };
        let err = in_background(p, || -> u32 { panic!("a load that panics") })
            .await
            .unwrap_err();
        assert!(err.contains("without a result"), "{err}");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn loads_run_as_sched_idle_when_asked() {
        use thread_priority::{NormalThreadSchedulePolicy, ThreadSchedulePolicy};
        let policy = in_background(
            LoadPriority {
                nice: 7,
                idle: true,
            },
            || thread_priority::thread_schedule_policy().ok(),
        )
        .await
        .unwrap();
        assert_eq!(
            policy,
            Some(ThreadSchedulePolicy::Normal(
                NormalThreadSchedulePolicy::Idle
            ))
        );
        // The caller's own thread keeps its policy.
        assert_ne!(
            thread_priority::thread_schedule_policy().ok(),
            Some(ThreadSchedulePolicy::Normal(
                NormalThreadSchedulePolicy::Idle
            ))
        );
    }
}
