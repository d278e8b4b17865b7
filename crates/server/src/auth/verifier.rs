//! The threads that verify passwords for every worker: a bounded queue and a few
//! threads, started the first time a password is verified. A worker sends a check and
//! awaits its answer while it serves its other connections.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::oneshot;

use super::Hash;

/// Checks waiting for a thread; one more is refused (503) rather than queued.
const QUEUE: usize = 256;

type Job = (Hash, Vec<u8>, oneshot::Sender<bool>);

static POOL: OnceLock<SyncSender<Job>> = OnceLock::new();

/// Half the cores, one at least and four at most: verification may take that much CPU
/// from the workers under a flood of wrong passwords, no more.
fn threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / 2).clamp(1, 4)
}

fn start() -> SyncSender<Job> {
    let (send, receive) = sync_channel::<Job>(QUEUE);
    let receive = Arc::new(Mutex::new(receive));
    for i in 0..threads() {
        let receive = receive.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("tessera-verify-{i}"))
            .spawn(move || run(&receive));
        if let Err(e) = spawned {
            tracing::error!("cannot start a password verifier thread: {e}");
        }
    }
    send
}

fn run(jobs: &Mutex<Receiver<Job>>) {
    loop {
        let job = jobs.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok((hash, password, answer)) = job else {
            return;
        };
        let _ = answer.send(hash.verify(&password));
    }
}

/// Queues a check of `password` against `hash`: its answer to await, or `None` when
/// the queue is full.
pub(super) fn verify(hash: Hash, password: Vec<u8>) -> Option<oneshot::Receiver<bool>> {
    let (answer, receive) = oneshot::channel();
    match POOL.get_or_init(start).try_send((hash, password, answer)) {
        Ok(()) => Some(receive),
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_refuses_at_once_instead_of_waiting() {
        // Cost 31: each thread that takes one of these is busy for as long as the test
        // process lives, so the queue behind them fills.
        let stuck = "$2b$31$LQLLyJ5cLmTXJcsN1PZVt.0Q.IG9gkgKB0KUbz4hJGoJiKiTMF.r2";
        let refused = (0..threads() + QUEUE + 1)
            .map(|_| verify(Hash::Bcrypt(stuck.into()), b"x".to_vec()))
            .filter(Option::is_none)
            .count();
        assert!(refused >= 1);
    }
}
