//! Progress bars for long CLI phases (indicatif), behind the library's [`Progress`] trait.

use crate::train::Progress;
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Mutex;

/// One bar per phase, with an ETA; drawn on stderr and hidden when stderr is not a terminal.
#[derive(Debug, Default)]
pub struct Bars {
    current: Mutex<Option<ProgressBar>>,
}

impl Bars {
    /// No bar yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Finishes the current bar.
    pub fn finish(&self) {
        if let Ok(mut cur) = self.current.lock() {
            if let Some(bar) = cur.take() {
                bar.finish();
            }
        }
    }
}

impl Progress for Bars {
    fn phase(&self, name: &str, total: u64) {
        self.finish();
        let bar = ProgressBar::new(total);
        if let Ok(style) = ProgressStyle::with_template(
            "{msg:>32} [{elapsed_precise}] {wide_bar} {pos}/{len} (eta {eta})",
        ) {
            bar.set_style(style);
        }
        bar.set_message(name.to_string());
        if let Ok(mut cur) = self.current.lock() {
            *cur = Some(bar);
        }
    }

    fn step(&self) {
        if let Ok(cur) = self.current.lock() {
            if let Some(bar) = cur.as_ref() {
                bar.inc(1);
            }
        }
    }
}
