//! `tessera bench`: the HTTP load generator. Arguments become a
//! [`::bench::Config`]; the engine and the reports live in the `bench` crate.

use ::bench::compare::compare;
use ::bench::config::{parse_duration, parse_duration_or_secs, read_request_file};
use ::bench::find_max::{find_max, FindMaxOptions, Slo};
use ::bench::{Config, Invocation, Progress, RequestSpec};
use anyhow::{bail, Context};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration_or_secs(s).ok_or_else(|| format!("invalid duration {s:?} (e.g. 10s, 500ms, 2m)"))
}

fn strict_duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s)
        .or_else(|| parse_duration_or_secs(s))
        .ok_or_else(|| format!("invalid duration {s:?} (e.g. 10s, 500ms, 2m)"))
}

/// Load an HTTP/1.1 server and report throughput, latency and errors.
///
/// Closed model by default (each connection sends its next request when the
/// previous answer arrives); `--rate` switches to the open model, where latency
/// is measured from each request's intended send time.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  tessera bench -d 10s -c 50 http://127.0.0.1:8080/
  tessera bench -n 100000 -c 16 --pipeline 16 http://127.0.0.1:8080/
  tessera bench --rate 20000 -d 30s --html report.html http://127.0.0.1:8080/
  tessera bench --find-max --slo 'p99<10ms' http://127.0.0.1:8080/
  tessera bench --compare http://127.0.0.1:8080/ http://127.0.0.1:8081/

Documentation: docs/bench.md")]
pub struct Args {
    /// URLs to request, cycled in order (all on one host and port, or any hosts with --connect-to).
    #[arg(value_name = "URL")]
    urls: Vec<String>,
    /// Stop after this many requests.
    #[arg(short = 'n', long = "requests", value_name = "N")]
    requests: Option<u64>,
    /// Stop after this long (e.g. 10s, 500ms, 2m). Default 10s unless -n is given.
    #[arg(short = 'd', long, value_name = "TIME", value_parser = duration_arg)]
    duration: Option<Duration>,
    /// Connections in total.
    #[arg(short = 'c', long, default_value_t = 50, value_name = "N")]
    connections: usize,
    /// Worker threads, each one event loop. Default: the cores available.
    #[arg(short = 't', long, value_name = "N")]
    threads: Option<usize>,
    /// Keep connections alive (the default; accepted for ab/weighttp habits).
    #[arg(short = 'k', long = "keepalive", conflicts_with = "no_keepalive")]
    keepalive: bool,
    /// Open a new connection for every request.
    #[arg(long = "no-keepalive")]
    no_keepalive: bool,
    /// Requests in flight per connection (closed model).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pipeline: usize,
    /// Speak HTTP/2: ALPN h2 over TLS for https://, prior knowledge (h2c) for http://.
    #[arg(long)]
    http2: bool,
    /// Speak HTTP/3 over QUIC (https:// URLs; closed model).
    #[arg(long, conflicts_with = "http2")]
    http3: bool,
    /// HTTP/2 or HTTP/3 streams in flight per connection (as h2load's -m).
    #[arg(long, default_value_t = 1, value_name = "N")]
    streams: usize,
    /// https://: trust this CA file's certificates instead of the system's.
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    ca: Option<PathBuf>,
    /// https://: take any certificate (a test server's self-signed one).
    #[arg(long)]
    insecure: bool,
    /// Open connections at most this fast (per second) and report the connect rate.
    #[arg(long, value_name = "PER_SECOND")]
    ramp: Option<f64>,
    /// Extra request header, repeatable: -H 'Accept: text/html'.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Request method.
    #[arg(short = 'm', long, default_value = "GET")]
    method: String,
    /// Request body.
    #[arg(long, conflicts_with = "body_file")]
    body: Option<String>,
    /// Request body read from a file.
    #[arg(long, value_name = "PATH")]
    body_file: Option<PathBuf>,
    /// Weighted request mix, one per line: `[weight] [METHOD] URL [@body-file]`.
    #[arg(long, value_name = "PATH")]
    request_file: Option<PathBuf>,
    /// Connect to this unix socket instead of the URL's host and port.
    #[arg(long, value_name = "PATH")]
    unix_socket: Option<PathBuf>,
    /// Connect to HOST[:PORT] whatever the URLs' hosts, which may then differ (each request's Host and TLS server name are its URL's)
    #[arg(long, value_name = "HOST[:PORT]")]
    connect_to: Option<String>,
    /// Open model: hold this many requests per second.
    #[arg(long, value_name = "PER_SECOND")]
    rate: Option<f64>,
    /// A request without a complete answer after this long fails as a timeout.
    #[arg(long, default_value = "10s", value_parser = strict_duration_arg, value_name = "TIME")]
    timeout: Duration,
    /// Refuse targets that are not loopback addresses.
    #[arg(long)]
    loopback_only: bool,
    /// Print the result as JSON (schema: docs/bench.md) instead of text.
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML report with charts to this file.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Search for the highest rate that meets --slo (open-model steps).
    #[arg(long, requires = "slo")]
    find_max: bool,
    /// Latency objective on corrected latency for --find-max, e.g. 'p99<10ms'.
    #[arg(long, value_name = "OBJECTIVE")]
    slo: Option<String>,
    /// Length of each --find-max step.
    #[arg(long, default_value = "5s", value_parser = strict_duration_arg, value_name = "TIME")]
    step: Duration,
    /// Most --find-max steps before the confirming run.
    #[arg(long, default_value_t = 12, value_name = "N")]
    max_steps: usize,
    /// A/B mode: alternate rounds against two URLs and report the ratio B/A.
    #[arg(long, num_args = 2, value_names = ["URL_A", "URL_B"], conflicts_with = "find_max")]
    compare: Option<Vec<String>>,
    /// Rounds per side in --compare mode.
    #[arg(long, default_value_t = 5, value_name = "N")]
    rounds: usize,
    /// No progress line, even on a terminal.
    #[arg(short = 'q', long)]
    quiet: bool,
}

fn config(args: &Args, urls: &[String]) -> anyhow::Result<Config> {
    let body = match (&args.body, &args.body_file) {
        (Some(b), _) => Some(b.as_bytes().to_vec()),
        (None, Some(p)) => {
            Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?)
        }
        (None, None) => None,
    };
    let mut requests: Vec<RequestSpec> = urls
        .iter()
        .map(|u| RequestSpec {
            method: args.method.to_ascii_uppercase(),
            url: u.clone(),
            body: body.clone(),
            weight: 1,
        })
        .collect();
    if let Some(f) = &args.request_file {
        let base = urls.first().map(String::as_str);
        // A request file replaces the URL list; a URL given too is its base.
        requests = read_request_file(f, base)?;
    }
    if requests.is_empty() {
        bail!("give a URL (or --request-file, or --compare URL_A URL_B)");
    }
    let mut headers = Vec::new();
    for h in &args.headers {
        let (name, value) = h
            .split_once(':')
            .with_context(|| format!("header {h:?} is not 'Name: value'"))?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    let mut c = Config::new(requests);
    c.headers = headers;
    c.unix_socket = args.unix_socket.clone();
    c.connect_to = args.connect_to.clone();
    c.connections = args.connections;
    if let Some(t) = args.threads {
        c.threads = t;
    }
    c.requests_total = args.requests;
    c.duration = args.duration;
    c.rate = args.rate;
    c.keepalive = !args.no_keepalive;
    c.pipeline = args.pipeline;
    c.ramp = args.ramp;
    c.timeout = args.timeout;
    c.loopback_only = args.loopback_only;
    c.http2 = args.http2;
    c.http3 = args.http3;
    c.streams = args.streams;
    c.ca = args.ca.clone();
    c.insecure = args.insecure;
    Ok(c)
}

/// Set by the SIGINT handler: the first Ctrl-C ends the run early and still
/// prints the report; a second one kills the process as usual.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
    // SAFETY: signal() is async-signal-safe; restores the default for the next Ctrl-C.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
}

fn catch_ctrl_c() {
    // SAFETY: installs a handler that only stores to an atomic and resets itself.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
}

/// Prints a live progress line on stderr once a second, only on a terminal, and
/// passes a Ctrl-C on to the engine.
struct ProgressLine {
    done: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl ProgressLine {
    fn start(
        progress: Arc<Progress>,
        total: Option<u64>,
        duration: Option<Duration>,
        show: bool,
    ) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let handle = {
            let done = done.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut last = (start, 0u64);
                let mut err = std::io::stderr();
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    if INTERRUPTED.load(Ordering::Relaxed) {
                        progress.stop.store(true, Ordering::Relaxed);
                    }
                    if !show {
                        continue;
                    }
                    let now = Instant::now();
                    if now.duration_since(last.0) < Duration::from_secs(1) {
                        continue;
                    }
                    let n = progress.responses.load(Ordering::Relaxed);
                    let f = progress.failures.load(Ordering::Relaxed);
                    let rate = (n - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
                    last = (now, n);
                    let elapsed = start.elapsed().as_secs_f64();
                    let frac = match (total, duration) {
                        (Some(t), _) => n as f64 / t as f64,
                        (None, Some(d)) => elapsed / d.as_secs_f64(),
                        _ => 0.0,
                    }
                    .clamp(0.0, 1.0);
                    let filled = (frac * 20.0) as usize;
                    let _ = write!(
                        err,
                        "\r  [{}{}] {elapsed:>5.1}s {n:>10} requests {:>10} req/s {f} failed ",
                        "#".repeat(filled),
                        " ".repeat(20 - filled),
                        ::bench::report::fmt_si(rate),
                    );
                    let _ = err.flush();
                }
                if show {
                    let _ = write!(err, "\r{}\r", " ".repeat(90));
                }
            })
        };
        ProgressLine {
            done,
            handle: Some(handle),
        }
    }
}

impl Drop for ProgressLine {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn write_html(path: &PathBuf, html: String) -> anyhow::Result<()> {
    std::fs::write(path, html).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let inv = Invocation {
        tessera_version: env!("CARGO_PKG_VERSION").to_string(),
        args: std::env::args().collect(),
    };
    let interactive = std::io::stderr().is_terminal() && !args.quiet;
    let mut stdout = std::io::stdout().lock();

    if let Some(pair) = &args.compare {
        let a = config(&args, std::slice::from_ref(&pair[0]))?;
        let b = config(&args, std::slice::from_ref(&pair[1]))?;
        let (mut a, mut b) = (a, b);
        if args.duration.is_none() && args.requests.is_none() {
            // Short rounds by default: many alternations beat a few long runs.
            a.duration = Some(Duration::from_secs(2));
            b.duration = Some(Duration::from_secs(2));
        }
        let report = compare(&a, &b, args.rounds, &inv, &mut |round, side, r| {
            if interactive {
                eprintln!(
                    "  round {} {}: {} req/s, p99 {}",
                    round + 1,
                    ["A", "B"][side],
                    ::bench::report::fmt_si(r.requests_per_second),
                    ::bench::report::fmt_ms(r.latency_ms.p99)
                );
            }
        })?;
        if args.html.is_some() {
            bail!("--html is not available with --compare; use --json");
        }
        let out = if args.json {
            report.json()
        } else {
            report.text()
        };
        writeln!(stdout, "{}", out.trim_end())?;
        return Ok(());
    }

    let cfg = config(&args, &args.urls)?;

    if args.find_max {
        let slo = Slo::parse_all(args.slo.as_deref().unwrap_or_default())?;
        let opts = FindMaxOptions {
            start_rate: args.rate.unwrap_or(1000.0),
            step: args.step,
            max_steps: args.max_steps,
            ..Default::default()
        };
        let report = find_max(&cfg, &slo, &opts, &inv, &mut |s| {
            if interactive {
                eprintln!(
                    "  {:>10.0} req/s: achieved {:>10.0}, corrected p99 {:>10} {}",
                    s.rate,
                    s.achieved_rps,
                    ::bench::report::fmt_ms(s.corrected_p99_ms),
                    if s.passed { "pass" } else { "fail" }
                );
            }
        })?;
        if let Some(p) = &args.html {
            write_html(p, ::bench::html::render_find_max(&report))?;
        }
        let out = if args.json {
            report.json()
        } else {
            report.text()
        };
        writeln!(stdout, "{}", out.trim_end())?;
        return Ok(());
    }

    let progress = Arc::new(Progress::default());
    catch_ctrl_c();
    let report = {
        let _line = ProgressLine::start(
            progress.clone(),
            cfg.requests_total,
            cfg.effective_duration(),
            interactive && !args.json,
        );
        ::bench::run(&cfg, &inv, Some(progress))?
    };
    if let Some(p) = &args.html {
        write_html(p, ::bench::html::render(&report))?;
    }
    let out = if args.json {
        report.json()
    } else {
        report.text()
    };
    writeln!(stdout, "{}", out.trim_end())?;
    Ok(())
}
