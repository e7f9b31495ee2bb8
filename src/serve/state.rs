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
    /// The model now serving, if any.
    pub current: ArcSwapOption<Loaded>,
    /// What loads did.
    pub status: Mutex<ReloadStatus>,
    /// The pool batch predictions run on.
    pub pool: rayon::ThreadPool,
    /// The Prometheus exposition.
    pub metrics: PrometheusHandle,
    /// Serialises loads.
    pub(crate) reload_lock: tokio::sync::Mutex<Option<FileSig>>,
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
        Ok(Arc::new(AppState {
            cfg,
            current: ArcSwapOption::empty(),
            status: Mutex::new(ReloadStatus::default()),
            pool,
            metrics: metrics_handle(),
            reload_lock: tokio::sync::Mutex::new(None),
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

    /// Records that every thread that predicts now has scratch space for `loaded`.
    pub(super) fn raise_scratch_floor(&self, loaded: &Loaded) {
        if let Ok(mut f) = self.scratch_floor.lock() {
            *f = loaded.scratch.sizes;
        }
    }
}

/// Loads the configured model path now, whether or not it changed, and publishes it; on failure
/// the old model keeps serving and the error is recorded (as `POST /v1/admin/reload` does).
pub async fn reload_now(state: &Arc<AppState>) -> Result<ReloadOutcome, String> {
    reload::load_now(state, reload::Trigger::Force).await
}
