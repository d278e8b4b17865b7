//! Binary upgrade (SIGUSR2), as nginx's and Pingora's: the running process starts the
//! executable it was started as again, with the same arguments, and hands it its
//! listening sockets (inherited across exec, named in `TESSERA_LISTEN_FDS`); the new
//! process writes one byte to a pipe (`TESSERA_READY_FD`) once it serves, and only
//! then does the old one stop accepting and drain. A new process that fails to start
//! closes the pipe without writing, and the old one goes on serving.
//!
//! The executable is found by the path it was started with (`argv[0]` made absolute at
//! start), not `/proc/self/exe`, which keeps naming the file that was replaced: a new
//! version copied over the old file is what runs.

use std::ffi::OsString;
use std::io::Write as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The listening sockets handed over: `ADDR=FD,FD;...` (`server::Inherited::parse`).
const LISTEN_FDS: &str = "TESSERA_LISTEN_FDS";
/// The pipe the new process writes one byte to once it serves.
const READY_FD: &str = "TESSERA_READY_FD";

/// How long a new process may take to start serving before it is given up on.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The command this process was started with, for starting it again.
pub struct Exe {
    path: PathBuf,
    args: Vec<OsString>,
}

impl Exe {
    /// `argv[0]` resolved to an absolute path now (a bare name through `PATH`, a relative
    /// path against the current directory), and the arguments after it.
    pub fn at_start() -> Exe {
        let mut args = std::env::args_os();
        let argv0 = PathBuf::from(args.next().unwrap_or_default());
        let path = if argv0.components().count() > 1 || argv0.is_absolute() {
            std::path::absolute(&argv0).unwrap_or(argv0)
        } else {
            std::env::var_os("PATH")
                .and_then(|paths| {
                    std::env::split_paths(&paths)
                        .map(|dir| dir.join(&argv0))
                        .find(|p| p.is_file())
                })
                .and_then(|p| std::path::absolute(p).ok())
                .unwrap_or(argv0)
        };
        Exe {
            path,
            args: args.collect(),
        }
    }
}

/// What the previous process handed this one, when it was started by an upgrade.
pub struct Handover {
    pub sockets: server::Inherited,
    ready: Option<OwnedFd>,
}

impl Handover {
    /// Reads (and takes ownership of) what the environment names.
    pub fn from_env() -> anyhow::Result<Handover> {
        let sockets = match std::env::var(LISTEN_FDS) {
            Ok(spec) => {
                server::Inherited::parse(&spec).map_err(|e| anyhow::anyhow!("{LISTEN_FDS}: {e}"))?
            }
            Err(_) => server::Inherited::default(),
        };
        let ready = match std::env::var(READY_FD) {
            Ok(fd) => {
                let fd: RawFd = fd
                    .parse()
                    .map_err(|_| anyhow::anyhow!("{READY_FD}: `{fd}` is not a descriptor"))?;
                // SAFETY: fcntl(F_GETFD) only asks whether the descriptor is open.
                anyhow::ensure!(
                    unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0,
                    "{READY_FD}: descriptor {fd} is not open"
                );
                // SAFETY: the previous process opened it for this one alone.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                // SAFETY: fcntl on a descriptor this process owns.
                unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
                Some(fd)
            }
            Err(_) => None,
        };
        Ok(Handover { sockets, ready })
    }

    /// Whether this process was started by an upgrade.
    pub fn is_upgrade(&self) -> bool {
        self.ready.is_some()
    }

    /// Tells the previous process that this one serves (it then stops accepting).
    pub fn ready(&mut self) {
        if let Some(fd) = self.ready.take() {
            let mut pipe = std::fs::File::from(fd);
            if let Err(e) = pipe.write_all(b"1") {
                tracing::warn!(error = %e, "cannot tell the previous process that this one serves");
            }
        }
    }
}

/// Starts the new process with the listening sockets and waits until it serves.
/// Returns its pid, or why it did not start (it is then reaped and the caller goes on
/// serving).
pub async fn start(exe: &Exe, running: &server::Running) -> Result<u32, String> {
    let (read, write) = pipe().map_err(|e| format!("cannot create a pipe: {e}"))?;
    let write_fd = write.as_raw_fd();
    let spawned = running.hand_over(|spec, fds| {
        let mut inherit: Vec<RawFd> = fds.to_vec();
        inherit.push(write_fd);
        let mut command = std::process::Command::new(&exe.path);
        command
            .args(&exe.args)
            .env(LISTEN_FDS, spec)
            .env(READY_FD, write_fd.to_string());
        // SAFETY: between fork and exec the closure only calls fcntl(2), which is
        // async-signal-safe, on descriptors this process holds open during the spawn.
        unsafe {
            command.pre_exec(move || {
                for &fd in &inherit {
                    if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        command.spawn()
    });
    drop(write);
    let mut child = spawned.map_err(|e| format!("cannot start {}: {e}", exe.path.display()))?;
    let pid = child.id();
    let ready = async {
        let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(read)?;
        let mut byte = [0u8; 1];
        tokio::io::AsyncReadExt::read(&mut pipe, &mut byte).await
    };
    let outcome = match tokio::time::timeout(READY_TIMEOUT, ready).await {
        Ok(Ok(1)) => return Ok(pid),
        Ok(Ok(_)) => "exited before serving".to_string(),
        Ok(Err(e)) => format!("cannot read its readiness pipe: {e}"),
        Err(_) => {
            let _ = child.kill();
            format!("did not serve within {} s; killed", READY_TIMEOUT.as_secs())
        }
    };
    let status = match child.wait() {
        Ok(status) => format!(" ({status})"),
        Err(_) => String::new(),
    };
    Err(format!(
        "the new process {pid} ({}) {outcome}{status}",
        exe.path.display()
    ))
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills two descriptors on success, owned by nobody else.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just created.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Writes this process's pid to `path`, whole or not at all (a temporary file renamed
/// over it), so a reader never sees a partial pid.
pub fn write_pid_file(path: &Path) -> std::io::Result<()> {
    let pid = std::process::id();
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{pid}.tmp"));
    std::fs::write(&tmp, format!("{pid}\n"))?;
    std::fs::rename(&tmp, path)
}

/// Removes `path` if it still names this process (after an upgrade it names the new
/// one, which keeps it).
pub fn remove_pid_file(path: &Path) {
    let ours = std::fs::read_to_string(path)
        .ok()
        .is_some_and(|text| text.trim() == std::process::id().to_string());
    if ours {
        let _ = std::fs::remove_file(path);
    }
}
