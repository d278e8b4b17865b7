//! Wall-clock time as the cache stores it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch: entries carry wall-clock times so that another
/// process reading one from Redis can age it.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
