//! Wall-clock time as the cache stores it.

use std::time::UNIX_EPOCH;

/// Milliseconds since the Unix epoch: entries carry wall-clock times so that another
/// process reading one from Redis can age it. On a worker, as of its loop's turn
/// (`evloop::time::system_now`): an object's age is then at most the turn's length
/// short, against lifetimes given in seconds; a request asks this several times
/// (lookup, store, its cache status) and the clock is read once.
pub(crate) fn now_ms() -> u64 {
    evloop::time::system_now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Milliseconds since the Unix epoch, read now: for a purge's time, which a Redis record
/// made after it must not predate (the turn's reading may be a turn early).
pub(crate) fn now_ms_exact() -> u64 {
    std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
