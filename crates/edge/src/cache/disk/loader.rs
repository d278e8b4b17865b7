//! The disk tier's background thread: at start, the loader (nginx's cache loader)
//! rebuilds the index from the files, at `loader_rate` files a second, while requests
//! are served (a key not yet loaded is a miss, and its fill is newer than the file);
//! then the janitor, which removes the objects not used for `inactive` or past use.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::{Duration, Instant};

use super::file::{self, Refused};
use super::index::Gone;
use super::shared::Shared;
use crate::clock::now_ms;

/// A file under `tmp/` older than this is left over from a fill that did not finish (a
/// process killed during a write). Younger ones may be another process's fill under way
/// (`check-config` and a reload start a tier on the same directory).
const TEMP_STALE: Duration = Duration::from_secs(3600);

/// The janitor's pause between passes, at most and at least.
const LONGEST_PAUSE: Duration = Duration::from_secs(60);
const SHORTEST_PAUSE: Duration = Duration::from_millis(100);

/// The thread's body: loads, then sweeps until the tier is dropped.
pub(super) fn run(shared: Weak<Shared>, root: PathBuf) {
    clear_temp(&root);
    let started = Instant::now();
    let mut loaded = 0u64;
    for dir in level_dirs(&root) {
        let Ok(files) = std::fs::read_dir(&dir) else {
            continue;
        };
        for f in files.flatten() {
            let Some(s) = shared.upgrade() else {
                return;
            };
            load_one(&s, &root, &f.path());
            loaded += 1;
            s.counters.loader_files.fetch_add(1, Ordering::Relaxed);
            let due = Duration::from_secs_f64(loaded as f64 / f64::from(s.settings.loader_rate));
            drop(s);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    let pause = match shared.upgrade() {
        Some(s) => {
            s.loaded.store(true, Ordering::Release);
            tracing::info!(files = loaded, "disk cache loaded");
            (s.settings.inactive / 4).clamp(SHORTEST_PAUSE, LONGEST_PAUSE)
        }
        None => return,
    };
    loop {
        std::thread::sleep(pause);
        let Some(s) = shared.upgrade() else {
            return;
        };
        let now = now_ms();
        let gone = s.index().remove_where(|_, m| s.expired(m, now));
        s.count_gone(Gone::Inactive, gone.len());
        s.unlink(&gone);
        clear_temp(&root);
    }
}

/// Indexes one file, or removes it when it is corrupted, out of place or of no use.
fn load_one(s: &Shared, root: &Path, path: &Path) {
    let now = now_ms();
    match file::check(path) {
        Ok((header, size)) => {
            let in_place = file::path_of(root, &header.key) == path;
            if !in_place || header.useless_ms <= now {
                let _ = std::fs::remove_file(path);
                return;
            }
            let evicted = {
                let mut index = s.index();
                index.insert(&header, size, now, true);
                index.over(s.settings.max_size)
            };
            s.count_gone(Gone::Size, evicted.len());
            s.unlink(&evicted);
        }
        Err(Refused::Corrupt(why)) => {
            tracing::warn!(path = %path.display(), why, "disk cache file dropped at load");
            s.count_gone(Gone::Corrupt, 1);
            let _ = std::fs::remove_file(path);
        }
        Err(Refused::Io(e)) => {
            tracing::warn!(path = %path.display(), error = %e, "disk cache file not read");
        }
    }
}

/// Removes what fills that did not finish left under `tmp/` ([`TEMP_STALE`]).
fn clear_temp(root: &Path) {
    let Ok(files) = std::fs::read_dir(file::temp_dir(root)) else {
        return;
    };
    for f in files.flatten() {
        let age = f.metadata().and_then(|m| m.modified()).ok();
        let age = age.and_then(|t| t.elapsed().ok());
        if age.is_some_and(|a| a > TEMP_STALE) {
            let _ = std::fs::remove_file(f.path());
        }
    }
}

/// The second-level directories (`root/c/ab`), those with hex names only.
fn level_dirs(root: &Path) -> Vec<PathBuf> {
    let hex = |p: &Path, n: usize| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|name| name.len() == n && name.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let subdirs = |dir: &Path, n: usize| -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| hex(p, n) && p.is_dir())
            .collect();
        dirs.sort();
        dirs
    };
    subdirs(root, 1)
        .iter()
        .flat_map(|d| subdirs(d, 2))
        .collect()
}
