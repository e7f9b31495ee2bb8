//! Training progress to Python's `logging`: the library's [`Progress`] callbacks, logged on the
//! `xmc` logger at each phase's start and at every quarter of its steps.

use pyo3::prelude::*;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use xmc::train::Progress;

/// The `xmc` logger, and the current phase's name, step count and steps done.
pub struct Log {
    logger: Py<PyAny>,
    name: Mutex<String>,
    total: AtomicU64,
    done: AtomicU64,
}

impl Log {
    /// The `xmc` logger of `logging`.
    pub fn new(py: Python<'_>) -> PyResult<Log> {
        let logger = py
            .import("logging")?
            .call_method1("getLogger", ("xmc",))?
            .unbind();
        Ok(Log {
            logger,
            name: Mutex::new(String::new()),
            total: AtomicU64::new(0),
            done: AtomicU64::new(0),
        })
    }

    /// Logs `message` at INFO (a failing handler is Python's business, not training's).
    pub fn info(&self, py: Python<'_>, message: &str) {
        let _ = self.logger.call_method1(py, "info", ("%s", message));
    }

    /// Logs the end of the last phase.
    pub fn finish(&self, py: Python<'_>) {
        self.info(py, "training done");
    }
}

impl Progress for Log {
    fn phase(&self, name: &str, total: u64) {
        if let Ok(mut n) = self.name.lock() {
            *n = name.to_string();
        }
        self.total.store(total, Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
        Python::attach(|py| self.info(py, &format!("{name}: {total} steps")));
    }

    fn step(&self) {
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        let total = self.total.load(Ordering::Relaxed);
        // Every quarter, once each: the step count at which done * 4 / total rises.
        if total >= 4 && done <= total && (done * 4 / total) > ((done - 1) * 4 / total) {
            let name = self.name.lock().map(|n| n.clone()).unwrap_or_default();
            Python::attach(|py| self.info(py, &format!("{name}: {done}/{total}")));
        }
    }
}
