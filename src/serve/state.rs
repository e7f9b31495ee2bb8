//! The state every handler shares: the config, the current model and the load record.

use super::*;

/// What the last loads did, for `GET /v1/model`.
#[derive(Clone, Debug, Default, serde::Serialize, utoipa::ToSchema)]
pub struct ReloadStatus {
    /// Successful loads since start.
    pub ok: u64,
    /// Failed loads since start.
    pub errors: u64,
    /// The last failure's message, if the last load failed.
    #[schema(required = true)]
    pub last_error: Option<String>,
    /// When it happened (Unix seconds).
    #[schema(required = true)]
    pub last_error_unix: Option<u64>,
}

/// Everything the handlers share.
pub struct AppState {
    /// The configuration.
    pub cfg: ServeConfig,
    /// What serves now: every model's versions ([`Snapshot`]).
    pub repo: ArcSwap<Snapshot>,
    /// The server's version policy (a model's `model.toml` may set its own).
    pub(crate) policy: VersionPolicy,
    /// What loads did.
    pub status: Mutex<ReloadStatus>,
    /// The pool batch predictions run on.
    pub pool: rayon::ThreadPool,
    /// The Prometheus exposition.
    pub metrics: PrometheusHandle,
    /// Serialises loads, and holds the files that failed and the models unloaded by request.
    pub(crate) reload_lock: tokio::sync::Mutex<repository::Book>,
    /// The scratch space that every thread that predicts is known to have (the sizes of the
    /// model [`warm_threads`] sized them for): a load needs no spares within it
    /// ([`reload::ScratchPool`]).
    pub(super) scratch_floor: Mutex<ScratchSizes>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").field("cfg", &self.cfg).finish()
    }
}

impl AppState {
    /// A state with no model loaded yet; call [`reload::load_now`] (or let the poller) load one.
    pub fn new(cfg: ServeConfig) -> Result<Arc<Self>, ApiError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(cfg.pool_threads)
            .thread_name(|i| format!("xmc-predict-{i}"))
            // Without a handler rayon aborts the process when a spawned job panics. With one,
            // the job's reply channel is dropped and its request gets a 500.
            .panic_handler(|_| tracing::error!("a prediction on the pool panicked"))
            .build()
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        // `ServeConfig::load` checked it; a config built in code gets the same message.
        let policy = cfg
            .version_policy
            .parse()
            .map_err(|m| ApiError::Internal(format!("version_policy: {m}")))?;
        Ok(Arc::new(AppState {
            cfg,
            repo: ArcSwap::from_pointee(Snapshot::default()),
            policy,
            status: Mutex::new(ReloadStatus::default()),
            pool,
            metrics: metrics_handle(),
            reload_lock: tokio::sync::Mutex::new(Default::default()),
            scratch_floor: Mutex::new(ScratchSizes::default()),
        }))
    }

    /// How many threads predict, each with scratch space of its own: the async workers (or
    /// `per_core`'s threads), one per core by default, and the prediction pool.
    pub(crate) fn predict_threads(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        cores + self.pool.current_num_threads()
    }

    pub(crate) fn scratch_floor(&self) -> ScratchSizes {
        self.scratch_floor
            .lock()
            .map_or_else(|_| ScratchSizes::default(), |f| *f)
    }

    /// Records that every thread that predicts now has scratch space for `sizes`.
    pub(super) fn raise_scratch_floor(&self, sizes: ScratchSizes) {
        if let Ok(mut f) = self.scratch_floor.lock() {
            *f = sizes;
        }
    }

    /// The model the `/v1` routes answer for: `default_model`, the one model of `--model`, or
    /// (`None`) the first name in sorted order that has a version serving.
    pub(crate) fn default_name(&self) -> Option<String> {
        match &self.cfg.repository {
            None => Some(repository::single_model_name(&self.cfg)),
            Some(_) => self.cfg.default_model.clone(),
        }
    }
}

/// Loads the configured model path (or every repository model) now, whether or not it
/// changed, and publishes it; on failure what served keeps serving and the error is recorded
/// (as `POST /v1/admin/reload?force=true` does).
pub async fn reload_now(state: &Arc<AppState>) -> Result<ReloadOutcome, String> {
    repository::load_now(state, reload::Trigger::Force).await
}
