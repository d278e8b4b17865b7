//! `tessera logs`: access-log analytics on the command line (`top`, `report`).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use logs::{Input, LogFormat, Options, ReportQuery, TopQuery};

/// Analyse access logs: the Wide Finder query and a full report.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: LogsCommand,
}

#[derive(clap::Subcommand)]
enum LogsCommand {
    /// Count the first capture group of PATTERN over matching lines; print the top N as
    /// `COUNT: KEY`, highest first, ties by key.
    Top(TopArgs),
    /// Summarise logs: hits, bytes, visitors, top URLs, 404s, clients, referrers, status
    /// codes, hits per hour, user agents.
    Report(ReportArgs),
    /// Write the parsed log as a Parquet file with typed columns (time, client, host,
    /// method, path, status, bytes, referer, user_agent), for DuckDB, ClickHouse or Spark.
    Export(ExportArgs),
}

#[derive(clap::Args)]
struct Common {
    /// Log files (plain or gzip); `-` reads standard input.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Rows to show.
    #[arg(short = 'n', long = "top", default_value_t = 10, value_name = "N")]
    top: usize,
    /// Worker threads [default: one per core].
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
}

#[derive(clap::Args)]
struct TopArgs {
    #[command(flatten)]
    common: Common,
    /// Regular expression, matched per line; its first capture group is the key (the
    /// whole match if it has none).
    #[arg(long, short = 'p')]
    pattern: String,
}

#[derive(clap::Args)]
struct ReportArgs {
    #[command(flatten)]
    common: Common,
    /// `auto`, `combined`, `common`, `vcombined`, `nginx`, `json`, or a format string such as
    /// '%h %l %u %t "%r" %>s %b' or '$remote_addr [$time_local] "$request" $status ...'.
    #[arg(long, default_value = "auto")]
    format: String,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Write the report as one self-contained HTML page.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// The site's own host name; referrers from it are not listed (repeatable). With a
    /// vhost field in the format, each line's own host is excluded too.
    #[arg(long = "site", value_name = "HOST")]
    sites: Vec<String>,
}

#[derive(clap::Args)]
struct ExportArgs {
    /// Log files (plain or gzip); `-` reads standard input.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// The Parquet file to write (replaced whole when the export succeeds; left as it was
    /// when it fails).
    #[arg(long, value_name = "OUT", required = true)]
    parquet: PathBuf,
    /// The log format, as `report --format` takes it.
    #[arg(long, default_value = "auto")]
    format: String,
    /// Worker threads [default: one per core].
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
}

/// Inputs at least this large get a progress bar (when stderr is a terminal).
const PROGRESS_MIN_BYTES: u64 = 256 << 20;

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        LogsCommand::Top(args) => top(args),
        LogsCommand::Report(args) => report(args),
        LogsCommand::Export(args) => export(args),
    }
}

fn options(common: &Common) -> Options {
    let mut opts = Options::default();
    if let Some(threads) = common.threads {
        opts.threads = threads.max(1);
    }
    opts
}

fn open(common: &Common) -> anyhow::Result<logs::Opened> {
    let inputs: Vec<Input> = common.files.iter().cloned().map(Input::from_arg).collect();
    Ok(logs::open(&inputs)?)
}

/// A progress bar on stderr for big mapped inputs; hidden when stderr is not a terminal.
fn progress_bar(opened: &logs::Opened) -> Option<indicatif::ProgressBar> {
    let total = opened.mapped_bytes();
    if total < PROGRESS_MIN_BYTES || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {eta}",
        )
        .expect("static template"),
    );
    Some(bar)
}

fn with_progress<T>(
    bar: Option<indicatif::ProgressBar>,
    work: impl FnOnce(Option<logs::Progress<'_>>) -> Result<T, logs::Error>,
) -> anyhow::Result<T> {
    let tick = |n: u64| {
        if let Some(bar) = &bar {
            bar.inc(n)
        }
    };
    let result = work(bar.as_ref().map(|_| &tick as logs::Progress<'_>));
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    Ok(result?)
}

/// Writes to stdout; a closed pipe (`| head`) ends the program quietly.
fn emit(bytes: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other.context("writing to stdout")?),
    }
}

fn top(args: TopArgs) -> anyhow::Result<()> {
    let query = TopQuery::new(&args.pattern)?;
    let mut opened = open(&args.common)?;
    let opts = options(&args.common);
    let counts = with_progress(progress_bar(&opened), |p| query.run(&mut opened, &opts, p))?;
    let mut out = Vec::with_capacity(64 * args.common.top.min(10_000));
    for (key, count) in counts.top(args.common.top) {
        write!(out, "{count}: ")?;
        out.extend_from_slice(key);
        out.push(b'\n');
    }
    emit(&out)
}

/// `--format`: a preset or format string, or with `auto` the format of the first line.
fn log_format(opened: &mut logs::Opened, format: &str) -> anyhow::Result<LogFormat> {
    if format != "auto" {
        return Ok(LogFormat::new(format)?);
    }
    let first = opened.first_line()?;
    if first.is_empty() {
        return Ok(LogFormat::new("combined")?);
    }
    LogFormat::detect(&first)
        .ok_or(logs::Error::UnknownFormat)
        .with_context(|| format!("first line: {}", String::from_utf8_lossy(&first)))
}

fn report(args: ReportArgs) -> anyhow::Result<()> {
    let mut opened = open(&args.common)?;
    let format = log_format(&mut opened, &args.format)?;
    let query = ReportQuery::new(format, &args.sites);
    let opts = options(&args.common);
    let analysis = with_progress(progress_bar(&opened), |p| query.run(&mut opened, &opts, p))?;
    let report = analysis.report(&query, args.common.top);
    if report.lines > 0 && report.hits == 0 {
        eprintln!(
            "tessera logs: none of {} lines matched the format {:?}",
            report.lines, report.format
        );
    }
    if let Some(path) = &args.html {
        std::fs::write(path, logs::render::html(&report))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if args.json {
        let mut json = serde_json::to_vec_pretty(&report)?;
        json.push(b'\n');
        emit(&json)?;
    } else if args.html.is_none() {
        emit(logs::render::text(&report).as_bytes())?;
    }
    Ok(())
}

fn export(args: ExportArgs) -> anyhow::Result<()> {
    let inputs: Vec<Input> = args.files.iter().cloned().map(Input::from_arg).collect();
    let mut opened = logs::open(&inputs)?;
    let format = log_format(&mut opened, &args.format)?;
    let mut opts = Options::default();
    if let Some(threads) = args.threads {
        opts.threads = threads.max(1);
    }
    // Written beside the destination and renamed over it: a failed export leaves no
    // half-written file where a reader would take it for a whole one.
    let out = &args.parquet;
    let mut partial = out.clone().into_os_string();
    partial.push(format!(".partial-{}", std::process::id()));
    let partial = PathBuf::from(partial);
    let file = std::fs::File::create(&partial)
        .with_context(|| format!("creating {}", partial.display()))?;
    let written = logs::export::export(
        &format,
        &mut opened,
        &opts,
        std::io::BufWriter::with_capacity(1 << 20, file),
    );
    let done = match written {
        Ok(done) => done,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(anyhow::Error::new(e).context(format!("exporting to {}", out.display())));
        }
    };
    if let Err(e) = std::fs::rename(&partial, out) {
        let _ = std::fs::remove_file(&partial);
        return Err(anyhow::Error::new(e).context(format!("writing {}", out.display())));
    }
    if done.lines > 0 && done.rows == 0 {
        eprintln!(
            "tessera logs: none of {} lines matched the format {:?}",
            done.lines,
            format.spec()
        );
    }
    eprintln!(
        "wrote {}: {} rows in {} row groups ({} malformed lines skipped)",
        out.display(),
        done.rows,
        done.row_groups,
        done.malformed
    );
    Ok(())
}
