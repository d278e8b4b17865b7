use std::sync::atomic::{AtomicBool, AtomicU64};

/// Live counters a caller may poll while a run is going (for a progress line).
#[derive(Debug, Default)]
pub struct Progress {
    pub responses: AtomicU64,
    pub failures: AtomicU64,
    /// Set to stop the run early (e.g. on Ctrl-C); workers notice within 100 ms.
    pub stop: AtomicBool,
}
