//! `tessera serve`: load the config, apply command-line overrides, bind, run until
//! SIGTERM or SIGINT (then shut down gracefully) or until a binary upgrade (SIGUSR2)
//! has handed the listeners to a new process and the connections drained; SIGHUP
//! reloads the whole configuration, SIGUSR1 reopens the access logs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::config::ServeConfig;
use crate::upgrade;

/// The root `tessera serve` takes when given none: the demo site, run from the
/// repository. Elsewhere (an installed binary) it does not exist and no files are served.
const DEFAULT_ROOT: &str = "examples/site";

/// The options that shape the configuration served: `serve` takes them, and so does
/// `check-config`, which checks the configuration they make.
#[derive(clap::Args, Debug)]
pub struct ConfigArgs {
    /// TOML config file; the options below override it (keys: docs/config.md)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory to serve [default: examples/site if it exists here, else no files]
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Address to listen on, IPv4 or IPv6 (`127.0.0.1:8080`, `[::1]:8080`); repeatable
    /// [default: 127.0.0.1:8080]
    #[arg(long, value_name = "ADDR")]
    listen: Vec<SocketAddr>,
    /// Address to listen on with TLS (HTTPS); repeatable; needs --cert and --key or
    /// `[tls]` in the config (docs/tls.md)
    #[arg(long, value_name = "ADDR")]
    tls_listen: Vec<SocketAddr>,
    /// Address that speaks only HTTP/2 with prior knowledge (h2c), no HTTP/1.1;
    /// repeatable (docs/http2.md)
    #[arg(long, value_name = "ADDR")]
    h2c_listen: Vec<SocketAddr>,
    /// UDP address that speaks HTTP/3 over QUIC, usually a --tls-listen address (the
    /// same certificates); repeatable (docs/http3.md)
    #[arg(long, value_name = "ADDR")]
    quic_listen: Vec<SocketAddr>,
    /// PEM file with the default TLS certificate and its chain, leaf first
    #[arg(long, value_name = "FILE", requires = "key")]
    cert: Option<PathBuf>,
    /// PEM file with the private key of --cert
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
    /// Worker threads, each with its own listener [default: number of cores]
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// Proxy every request to this origin (`http://host:port`, `https://host:port` over
    /// TLS verified against the system's roots, or `unix:PATH`), assembling ESI pages
    /// (Surrogate-Control: content="ESI/1.0") from fragments fetched in parallel
    #[arg(long, value_name = "URL")]
    proxy: Option<String>,
    /// Mount a Lua script at a path prefix: `/api=handlers/api.lua` (docs/lua.md);
    /// repeatable, added to the config's `[[script]]`s. SIGHUP reloads them with the
    /// configuration.
    #[arg(long, value_name = "PREFIX=FILE")]
    script: Vec<String>,
    /// Append an access log (combined format unless the config says otherwise) to FILE
    #[arg(long, value_name = "FILE")]
    access_log: Option<PathBuf>,
    /// Serve the admin paths `/metrics`, `/healthz`, `/status` and `/status.json` on
    /// this address of its own (docs/observability.md)
    #[arg(long, value_name = "ADDR")]
    admin_listen: Option<SocketAddr>,
}

#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  tessera serve
  tessera serve --root site --listen 0.0.0.0:8080 --access-log access.log
  tessera serve --config tessera.toml
  tessera serve --proxy http://127.0.0.1:9000 --script /api=api.lua --admin-listen 127.0.0.1:9145

Signals: SIGHUP reloads the configuration, SIGUSR1 reopens the access logs, SIGUSR2
upgrades the binary, SIGTERM and SIGINT shut down gracefully (docs/operations.md).

Documentation: docs/getting-started.md, docs/config.md")]
pub struct Args {
    #[command(flatten)]
    served: ConfigArgs,
    /// Listen backlog [default: 4096]
    #[arg(long, value_name = "N")]
    backlog: Option<u32>,
    /// Write the process id to FILE once serving (the new process of a binary upgrade
    /// writes its own); removed at exit
    #[arg(long, value_name = "FILE")]
    pid_file: Option<PathBuf>,
    /// Check the configuration these options make and exit, as `tessera check-config`
    /// does: `configuration OK`, or every problem as FILE:LINE: key: what is wrong, and
    /// exit status 1
    #[arg(long)]
    check: bool,
}

impl Args {
    /// `tessera check-config`'s options as `serve --check` takes them.
    pub fn checking(served: ConfigArgs) -> Args {
        Args {
            served,
            backlog: None,
            pid_file: None,
            check: true,
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let file = match load(&args) {
        Ok(file) => file,
        Err(e) if args.check => match &args.served.config {
            Some(path) => crate::check::unreadable(path, &e),
            None => return Err(e),
        },
        Err(e) => return Err(e),
    };
    if args.check {
        crate::check::report(args.served.config.as_deref(), &file);
        return Ok(());
    }
    // Before anything else runs: what a binary upgrade handed over, and the path this
    // executable was started as (for the next upgrade).
    let mut handover = upgrade::Handover::from_env()?;
    let exe = upgrade::Exe::at_start();
    let modules = file.modules(None)?;
    let routes = route_table(&file);
    let config = modules.server_config(&file.server);
    let root = config.root.clone();
    let workers = config.worker_count();
    let pid_file = config.pid_file.clone();
    // Handlers go in before anything is announced, so a SIGTERM sent as soon as the
    // address is printed still shuts down gracefully instead of killing the process.
    let mut signals = Signals::install()?;
    raise_open_file_limit();
    let inherited = std::mem::take(&mut handover.sockets);
    let server = server::Server::bind_inheriting(
        config,
        modules.all.clone(),
        &crate::config::MODULE_KINDS,
        inherited,
    )
    .map_err(what_to_do)?;
    if let (Some(proxy), Some(&first)) = (&modules.proxy, server.local_addrs().first()) {
        proxy.listening_on(first);
    }
    // What answers the paths no other line lists; nothing when a route takes `/`.
    let what = match (&args.served.proxy, &root) {
        (Some(url), _) => format!(" a proxy to {url}"),
        _ if routes.iter().any(|(prefix, _)| prefix == "/") => String::new(),
        (None, Some(root)) => format!(" {}", root.display()),
        (None, None) => format!(" no files (no --root, and no {DEFAULT_ROOT} here)"),
    };
    let plural = if workers == 1 { "" } else { "s" };
    let listening = (server.local_addrs().iter().map(|a| ("http", a, "")))
        .chain(server.tls_addrs().iter().map(|a| ("https", a, "")))
        .chain(
            server
                .h2c_addrs()
                .iter()
                .map(|a| ("http", a, ", HTTP/2 with prior knowledge only")),
        )
        .chain(
            server
                .quic_addrs()
                .iter()
                .map(|a| ("https", a, ", HTTP/3 over QUIC (UDP)")),
        );
    for (scheme, addr, only) in listening {
        eprintln!(
            "tessera: serving{what} on {scheme}://{addr}/ with {workers} worker{plural}{only}"
        );
    }
    if let Some(&addr) = server.local_addrs().first() {
        let width = routes.iter().map(|(p, _)| p.len()).max().unwrap_or(0);
        for (prefix, what) in &routes {
            eprintln!("tessera:   http://{addr}{prefix:width$}  {what}");
        }
    }
    if let Some(addr) = server.admin_addr() {
        let who = match (&file.server.admin_allow[..], &file.server.admin_token) {
            ([], None) => "loopback clients".to_string(),
            ([], Some(_)) => "loopback clients and the admin_token".to_string(),
            (allow, token) => format!(
                "{}{}",
                allow
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if token.is_some() {
                    " and the admin_token"
                } else {
                    ""
                }
            ),
        };
        eprintln!("tessera: admin on http://{addr}/metrics, /healthz and /status, for {who}");
    }
    let acme = crate::certificates::start(&file.server, server.acme())?;
    let running = server.start().map_err(what_to_do)?;
    if let Some(path) = &pid_file {
        if let Err(e) = upgrade::write_pid_file(path) {
            tracing::error!(path = %path.display(), error = %e, "cannot write the pid file");
        }
    }
    // Under systemd (Type=notify): ready once every listener is open and the workers
    // run; after an upgrade this process is the service's main process from now on.
    let mut ready = vec![sd_notify::NotifyState::Ready];
    if handover.is_upgrade() {
        ready.push(sd_notify::NotifyState::MainPid(std::process::id()));
    }
    if let Err(e) = sd_notify::notify(&ready) {
        tracing::warn!(error = %e, "cannot tell systemd that tessera is ready");
    }
    handover.ready();
    let mut live = Live {
        args: &args,
        file,
        modules,
        acme,
    };
    let ended = signals.serve(&running, &exe, &mut live);
    let modules = live.modules;
    match ended {
        Ended::Stop => {
            eprintln!("tessera: shutting down");
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
            running.shutdown();
        }
        Ended::Drained => eprintln!(
            "tessera: process {} handed over to its successor and drained; exiting",
            std::process::id()
        ),
    }
    let dropped = running.access_log_dropped();
    let refusals = running.refusals();
    let cache = modules.proxy.as_ref().and_then(|p| p.cache_stats());
    running.join();
    if let Some(path) = &pid_file {
        upgrade::remove_pid_file(path);
    }
    for (name, opened) in modules
        .proxy
        .map(|p| p.upstream_connections())
        .unwrap_or_default()
    {
        eprintln!("tessera: upstream {name}: {opened} connections opened");
    }
    if let Some(c) = cache {
        let mut line = format!(
            "tessera: cache: {} hits, {} misses, {} stale served, {} coalesced, {} of {} bytes in {} objects",
            c.hits, c.misses, c.stale_served, c.coalesced, c.weight, c.capacity, c.entries
        );
        if let Some(r) = c.shared {
            line.push_str(&format!(
                "; redis: {} hits, {} misses ({} records refused), {} errors, {} skipped, {} writes ({} dropped), breaker opened {} times",
                r.hits, r.misses, r.rejected, r.errors, r.skipped, r.writes, r.writes_dropped, r.breaker_opened
            ));
        }
        eprintln!("{line}");
    }
    if !refusals.is_empty() {
        let total: u64 = refusals.iter().map(|(_, n)| n).sum();
        let detail: Vec<String> = refusals
            .iter()
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
        eprintln!("tessera: refused {total} requests ({})", detail.join(", "));
    }
    if dropped > 0 {
        eprintln!("tessera: {dropped} access log lines were dropped (the disk did not keep up)");
    }
    Ok(())
}

/// The configuration file with the command line's options applied over it.
fn load(args: &Args) -> anyhow::Result<ServeConfig> {
    let (backlog, pid_file, args) = (args.backlog, &args.pid_file, &args.served);
    let mut file = match &args.config {
        Some(path) => ServeConfig::load(path)?,
        None => ServeConfig::default(),
    };
    let config = &mut file.server;
    if let Some(root) = &args.root {
        config.root = Some(root.clone());
    }
    if config.root.is_none() && Path::new(DEFAULT_ROOT).is_dir() {
        config.root = Some(DEFAULT_ROOT.into());
    }
    if !args.listen.is_empty() {
        config.listen = args.listen.clone();
    }
    if !args.tls_listen.is_empty() {
        config.tls_listen = args.tls_listen.clone();
    }
    if !args.h2c_listen.is_empty() {
        config.h2c_listen = args.h2c_listen.clone();
    }
    if !args.quic_listen.is_empty() {
        config.quic_listen = args.quic_listen.clone();
    }
    if let (Some(cert), Some(key)) = (&args.cert, &args.key) {
        config.tls.certificate = Some(cert.clone());
        config.tls.key = Some(key.clone());
    }
    if let Some(workers) = args.workers {
        anyhow::ensure!(workers > 0, "--workers must be at least 1");
        config.workers = workers;
    }
    if let Some(backlog) = backlog {
        config.backlog = backlog;
    }
    if let Some(path) = &args.access_log {
        config.access_log = Some(path.clone());
    }
    if let Some(addr) = args.admin_listen {
        config.admin_listen = Some(addr);
    }
    if let Some(path) = pid_file {
        config.pid_file = Some(path.clone());
    }
    if let Some(url) = &args.proxy {
        let edge = edge::EdgeConfig::proxy_to_url(url)
            .map_err(|e| anyhow::anyhow!("--proxy {url}: {e}"))?;
        file.upstream = edge.upstream;
        // The top-level routes are replaced; the hosts' keep theirs.
        file.route.retain(|r| r.site != 0);
        file.route.extend(edge.route);
    }
    for spec in &args.script {
        let mount = server_script(spec)?;
        file.script
            .retain(|s| s.prefix != mount.prefix || s.site != 0);
        file.script.push(mount);
    }
    Ok(file)
}

/// The configuration being served, and what a reload needs to replace it.
struct Live<'a> {
    args: &'a Args,
    file: ServeConfig,
    modules: crate::config::Modules,
    /// The ACME client's names, which a reload changes.
    acme: Option<acme::Names>,
}

impl Live<'_> {
    /// SIGHUP: reads the configuration again (the file, with the same command-line
    /// options over it) and, when it is valid, has the server use it; when it is not,
    /// nothing changes and every problem is logged as `check-config` prints it.
    fn reload(&mut self, running: &server::Running) {
        if !self.try_reload(running) {
            running.reload_failed();
        }
    }

    /// The reload; false (with the problems logged) when the configuration is not valid.
    fn try_reload(&mut self, running: &server::Running) -> bool {
        let config_path = self.args.served.config.as_deref();
        let failed = |problem: &str| {
            let text = config_path.and_then(|p| std::fs::read_to_string(p).ok());
            let at = crate::check::located(config_path, text.as_deref(), problem);
            tracing::error!("reload failed, configuration unchanged: {at}");
        };
        let file = match load(self.args) {
            Ok(file) => file,
            Err(e) => {
                failed(&format!("{e:#}"));
                return false;
            }
        };
        let problems = crate::check::problems_but_modules(&file);
        if !problems.is_empty() {
            problems.iter().for_each(|p| failed(p));
            return false;
        }
        let modules = match file.modules(Some(&self.modules)) {
            Ok(modules) => modules,
            Err(e) => {
                failed(&format!("{e:#}"));
                return false;
            }
        };
        if let (Some(proxy), Some(&first)) = (&modules.proxy, running.local_addrs().first()) {
            proxy.listening_on(first);
        }
        match running.reload(modules.server_config(&file.server), modules.all.clone()) {
            Ok(reloaded) => {
                let changes = crate::reload::changes(
                    (&self.file, &self.modules),
                    (&file, &modules),
                    &reloaded,
                );
                tracing::info!(
                    generation = reloaded.generation,
                    "configuration reloaded: {changes}"
                );
                if let (Some(names), Some(client)) = (&reloaded.acme_names, &self.acme) {
                    tracing::info!(names = %names.join(", "), "[acme] names changed by the reload");
                    client.set(names.clone());
                }
                for key in &reloaded.not_applied {
                    tracing::warn!(
                        "`{key}` changed: it takes effect at the next start or binary upgrade (SIGUSR2)"
                    );
                }
                self.file = file;
                self.modules = modules;
                true
            }
            Err(e) => {
                failed(&format!("{:#}", anyhow::Error::from(e)));
                false
            }
        }
    }
}

/// What answers each configured prefix, for the start-up lines that list the URLs to
/// open: `(prefix, description)`, sorted by prefix.
fn route_table(file: &ServeConfig) -> Vec<(String, String)> {
    let mut table: Vec<(String, String)> = Vec::new();
    for r in &file.route {
        let what = match (&r.upstream, &r.root) {
            (Some(name), _) => {
                let to = file.upstream.iter().find(|u| &u.name == name);
                let at = to.map_or(String::new(), |u| {
                    let peers = u.peer.iter().map(|p| p.address.as_str());
                    let all: Vec<&str> = u
                        .addresses
                        .iter()
                        .map(|a| a.as_str())
                        .chain(peers)
                        .collect();
                    if all.iter().all(|a| *a == edge::SELF_ADDRESS) {
                        format!(" (this server, {}/...)", u.path_prefix)
                    } else {
                        format!(" ({}{}/...)", all.join(", "), u.path_prefix)
                    }
                });
                let esi = format!("{:?}", r.esi).to_lowercase();
                format!("proxied to upstream `{name}`{at}, ESI {esi}")
            }
            (None, Some(root)) => format!("files from {}", root.display()),
            (None, None) => continue,
        };
        table.push((r.prefix.clone(), what));
    }
    for s in &file.script {
        table.push((
            s.prefix.clone(),
            format!("Lua handler {}", s.path.display()),
        ));
    }
    table.sort();
    table
}

/// A start-up failure in one line, with what to do about it when that is clear.
fn what_to_do(e: server::Error) -> anyhow::Error {
    use std::io::ErrorKind;
    let hint = match &e {
        server::Error::Listen { source, .. } if source.kind() == ErrorKind::AddrInUse => {
            "another program listens there: stop it, or choose another address with --listen"
        }
        server::Error::Listen { source, .. } if source.kind() == ErrorKind::PermissionDenied => {
            "ports below 1024 need root or CAP_NET_BIND_SERVICE: choose a port above 1023 with --listen"
        }
        server::Error::Root { .. } => "give an existing directory with --root or `root` in the config",
        server::Error::AccessLog { source, .. } if source.kind() == ErrorKind::NotFound => {
            "create its directory, or log elsewhere with --access-log"
        }
        _ => return e.into(),
    };
    anyhow::anyhow!("{:#}; {hint}", anyhow::Error::from(e))
}

fn server_script(spec: &str) -> anyhow::Result<script::ScriptConfig> {
    script::ScriptConfig::from_mount(spec)
        .ok_or_else(|| anyhow::anyhow!("--script {spec}: expected PREFIX=FILE, like /api=api.lua"))
}

/// How serving ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// SIGTERM or SIGINT: shut down.
    Stop,
    /// A binary upgrade: the new process serves and this one drained its connections.
    Drained,
}

/// SIGTERM and SIGINT (stop), SIGUSR1 (reopen logs), SIGHUP (reload the configuration)
/// and SIGUSR2 (binary upgrade), caught on a small runtime of the main thread.
struct Signals {
    runtime: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let (term, int, usr1, usr2, hup) = runtime.block_on(async {
            Ok::<_, std::io::Error>((
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
                signal(SignalKind::user_defined1())?,
                signal(SignalKind::user_defined2())?,
                signal(SignalKind::hangup())?,
            ))
        })?;
        Ok(Signals {
            runtime,
            term,
            int,
            usr1,
            usr2,
            hup,
        })
    }

    /// Handles signals until a stop signal, or until the connections have drained after
    /// a binary upgrade.
    fn serve(&mut self, running: &server::Running, exe: &upgrade::Exe, live: &mut Live) -> Ended {
        self.runtime.block_on(async {
            loop {
                tokio::select! {
                    _ = self.term.recv() => return Ended::Stop,
                    _ = self.int.recv() => return Ended::Stop,
                    _ = self.usr1.recv() => running.reopen_logs(),
                    _ = self.hup.recv() => live.reload(running),
                    _ = self.usr2.recv() => match upgrade::start(exe, running).await {
                        Ok(pid) => {
                            tracing::info!(new_pid = pid, "binary upgrade: the new process serves; this one stops accepting and exits once its connections have ended");
                            running.drain();
                            break;
                        }
                        Err(e) => tracing::error!("binary upgrade failed, still serving: {e}"),
                    },
                }
            }
            // Draining: a stop signal still shuts down at once; others are ignored.
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
            loop {
                tokio::select! {
                    _ = self.term.recv() => return Ended::Stop,
                    _ = self.int.recv() => return Ended::Stop,
                    _ = self.usr1.recv() => running.reopen_logs(),
                    _ = self.hup.recv() => tracing::warn!("draining after a binary upgrade: SIGHUP ignored (send it to the new process)"),
                    _ = self.usr2.recv() => tracing::warn!("draining after a binary upgrade: SIGUSR2 ignored (send it to the new process)"),
                    _ = tick.tick() => if running.finished() { return Ended::Drained },
                }
            }
        })
    }
}

/// Every connection is a descriptor: lift the soft limit to the hard one, as nginx's
/// worker_rlimit_nofile and h2o do, so max_connections is not cut short by a default 1024.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
