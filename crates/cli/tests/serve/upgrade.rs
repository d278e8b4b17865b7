//! SIGUSR2: binary upgrade, the listening sockets handed to a new process, no request
//! lost.

use std::path::Path;
use std::time::Duration;

use crate::harness::*;

pub(crate) fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether `pid` runs (exists and is not a zombie waiting to be reaped).
pub(crate) fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            Some(state != 'Z' && state != 'X')
        })
        .unwrap_or(false)
}

/// Kills the processes an upgrade started (not children of the test) when the test
/// ends, whatever happened.
pub(crate) struct Successors(pub(crate) Vec<i32>);

impl Drop for Successors {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: kill(2) on a process this test started through the server.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

pub(crate) fn upgrade(pid_file: &Path, successors: &mut Successors) -> i32 {
    let old = read_pid(pid_file).unwrap();
    // SAFETY: kill(2) on the server process.
    unsafe { libc::kill(old, libc::SIGUSR2) };
    eventually("the new process's pid", || {
        read_pid(pid_file).is_some_and(|p| p != old)
    });
    let new = read_pid(pid_file).unwrap();
    successors.0.push(new);
    new
}

#[test]
fn three_upgrades_in_a_row_lose_no_request() {
    let site = Site::new();
    site.write("who.txt", b"top\n");
    let pid_file = site.dir.path().join("tessera.pid");
    let server = Server::start(&site.root(), &["--pid-file", pid_file.to_str().unwrap()]);
    let first = server.child.id() as i32;
    eventually("the pid file", || read_pid(&pid_file) == Some(first));
    let mut successors = Successors(Vec::new());
    let load = Load::start(server.addr, "/who.txt", b"top\n");
    std::thread::sleep(Duration::from_millis(300));
    let mut pids = vec![first];
    for _ in 0..3 {
        pids.push(upgrade(&pid_file, &mut successors));
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(Duration::from_millis(300));
    let count = load.stop();
    assert_eq!(count.failed, 0, "failed requests: {:?}", count.errors);
    assert!(count.ok > 50, "only {} requests answered", count.ok);
    // The pid file names a live process that serves; the ones it replaced are gone.
    let last = *pids.last().unwrap();
    assert_eq!(read_pid(&pid_file), Some(last));
    assert!(alive(last));
    assert_eq!(server.get("/who.txt").body, b"top\n");
    for &pid in &pids[..3] {
        eventually("a replaced process to exit", || !alive(pid));
    }
    assert!(stderr_has(&server, "listening sockets taken over"));
    assert!(stderr_has(
        &server,
        "handed over to its successor and drained"
    ));
}

#[test]
fn an_upgrade_to_a_binary_that_does_not_start_leaves_the_old_one_serving() {
    let site = Site::new();
    site.write("who.txt", b"top\n");
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let exe = dir.path().join("tessera");
    let install = |from: &Path| {
        // A new file renamed over the old, as package managers replace binaries.
        let next = dir.path().join("tessera.next");
        let _ = std::fs::remove_file(&next);
        if std::fs::hard_link(from, &next).is_err() {
            std::fs::copy(from, &next).unwrap();
        }
        std::fs::rename(&next, &exe).unwrap();
    };
    install(Path::new(env!("CARGO_BIN_EXE_tessera")));
    let pid_file = site.dir.path().join("tessera.pid");
    let args: Vec<String> = [
        "serve",
        "--root",
        site.root().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--pid-file",
        pid_file.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let server = Server::start_program(&exe, Path::new("."), &args, &[]);
    let first = server.child.id() as i32;
    eventually("the pid file", || read_pid(&pid_file) == Some(first));
    let mut successors = Successors(Vec::new());

    // A "new version" that exits at once.
    let broken = dir.path().join("broken");
    std::fs::write(&broken, "#!/bin/sh\nexit 3\n").unwrap();
    std::fs::set_permissions(&broken, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    install(&broken);
    server.signal(libc::SIGUSR2);
    eventually("the failure", || {
        stderr_has(&server, "binary upgrade failed")
    });
    assert!(stderr_has(&server, "exited before serving"));
    assert_eq!(server.get("/who.txt").body, b"top\n");
    assert_eq!(read_pid(&pid_file), Some(first));

    // The real binary back in place: the next upgrade runs it, from the same path.
    install(Path::new(env!("CARGO_BIN_EXE_tessera")));
    let new = upgrade(&pid_file, &mut successors);
    assert!(alive(new));
    assert_eq!(server.get("/who.txt").body, b"top\n");
    eventually("the old process to exit", || !alive(first));
}
