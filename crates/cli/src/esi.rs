//! `tessera esi`: check or render an ESI template offline.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};

/// Check or render an ESI template offline.
#[derive(Parser, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: EsiCommand,
}

#[derive(Subcommand, Debug)]
enum EsiCommand {
    /// Print a template's includes, variables, inline fragments and warnings. Exits with
    /// status 1 when there are warnings.
    Check {
        /// The template file.
        file: PathBuf,
    },
    /// Render a template for one request, serving includes from local files.
    Render(RenderArgs),
}

#[derive(Parser, Debug)]
struct RenderArgs {
    /// The template file.
    file: PathBuf,
    /// The page URL: includes resolve against it, QUERY_STRING comes from it.
    #[arg(long, default_value = "http://localhost/")]
    url: String,
    /// Query string to append to the URL (`a=1&b=2`).
    #[arg(long)]
    query: Option<String>,
    /// A cookie, `name=value` (repeatable).
    #[arg(long = "cookie", value_name = "NAME=VALUE")]
    cookies: Vec<String>,
    /// A request header, `Name: value` (repeatable): Host, Referer, User-Agent,
    /// Accept-Language, Cookie.
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Serve URL from FILE (repeatable). URL may be relative to the page URL.
    #[arg(long = "fragment", value_name = "URL=FILE")]
    fragments: Vec<String>,
    /// How deep fragments may include fragments.
    #[arg(long, default_value_t = 10)]
    max_depth: usize,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        EsiCommand::Check { file } => check(&file),
        EsiCommand::Render(args) => render(args),
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// 1-based line and column of a byte offset.
fn line_col(input: &[u8], offset: u64) -> (usize, usize) {
    let before = &input[..(offset as usize).min(input.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = before.len()
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1)
        + 1;
    (line, col)
}

/// Writes to stdout; a closed pipe (`| head`) ends quietly.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => other.context("writing to stdout"),
    }
}

fn check(file: &Path) -> anyhow::Result<()> {
    let input = read(file)?;
    let template = ::esi::Template::parse(input.clone());
    let mut report = String::new();
    let name = file.display();
    report.push_str("includes:\n");
    for inc in template.includes() {
        let (line, col) = line_col(&input, inc.offset);
        report.push_str(&format!("  {name}:{line}:{col} src={:?}", inc.src));
        if let Some(alt) = &inc.alt {
            report.push_str(&format!(" alt={alt:?}"));
        }
        if inc.continue_on_error {
            report.push_str(" onerror=continue");
        }
        if let Some(ttl) = inc.ttl {
            report.push_str(&format!(" ttl={}s", ttl.as_secs()));
        }
        if let Some(t) = inc.timeout {
            report.push_str(&format!(" timeout={}ms", t.as_millis()));
        }
        if inc.no_store {
            report.push_str(" no-store");
        }
        report.push('\n');
    }
    report.push_str("variables:\n");
    for var in template.variables() {
        report.push_str(&format!("  {var}\n"));
    }
    if !template.inlines().is_empty() {
        report.push_str("inlines:\n");
        for inline in template.inlines() {
            let fetchable = if inline.fetchable { " fetchable" } else { "" };
            report.push_str(&format!(
                "  {:?} {} bytes{fetchable}\n",
                inline.name,
                inline.body.len()
            ));
        }
    }
    report.push_str("warnings:\n");
    for w in template.warnings() {
        let (line, col) = line_col(&input, w.offset);
        report.push_str(&format!("  {name}:{line}:{col} {}\n", w.kind));
    }
    write_stdout(report.as_bytes())?;
    let n = template.warnings().len();
    if n > 0 {
        bail!("{name}: {n} warning{}", if n == 1 { "" } else { "s" });
    }
    Ok(())
}

fn render(args: RenderArgs) -> anyhow::Result<()> {
    let input = read(&args.file)?;
    let template = ::esi::Template::parse(input.clone());
    let name = args.file.display();
    for w in template.warnings() {
        let (line, col) = line_col(&input, w.offset);
        eprintln!("warning: {name}:{line}:{col} {}", w.kind);
    }

    let mut url = args.url.clone();
    if let Some(q) = &args.query {
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(q.trim_start_matches('?'));
    }
    let mut req = ::esi::Request::new(url.clone());
    for header in &args.headers {
        let (n, v) = header
            .split_once(':')
            .with_context(|| format!("--header {header:?} is not `Name: value`"))?;
        req.set_header(n.trim(), v.trim());
    }
    for cookie in &args.cookies {
        if !cookie.contains('=') {
            bail!("--cookie {cookie:?} is not `name=value`");
        }
        req.set_header("cookie", cookie);
    }

    let mut files: HashMap<String, PathBuf> = HashMap::new();
    for spec in &args.fragments {
        // At the last `=`: a URL's query has them, a file name rarely.
        let (u, f) = spec
            .rsplit_once('=')
            .with_context(|| format!("--fragment {spec:?} is not `URL=FILE`"))?;
        files.insert(::esi::resolve(&url, u), PathBuf::from(f));
    }
    // esi:inline fragments of the page are served like files.
    let inlines: HashMap<String, Vec<u8>> = template
        .inlines()
        .iter()
        .map(|i| (::esi::resolve(&url, &i.name), i.body.to_vec()))
        .collect();
    let mut read_error = None;
    let mut get = |u: &str| {
        if let Some(body) = inlines.get(u) {
            return Some(body.clone().into());
        }
        let path = files.get(u)?;
        match std::fs::read(path) {
            Ok(body) => Some(body.into()),
            Err(e) => {
                read_error.get_or_insert(format!("reading {}: {e}", path.display()));
                None
            }
        }
    };
    let result = ::esi::render_sync(&template, &req, &mut get, args.max_depth);
    if let Some(e) = read_error {
        eprintln!("warning: {e}");
    }
    let parts = result.context("rendering failed")?;
    write_stdout(&parts.concat())
}
