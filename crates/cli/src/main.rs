//! The `tessera` binary: argument parsing, the config file's shape (`config`), and the
//! wiring of the library crates: it builds the modules (the proxy, Lua scripts) and hands
//! them to the server. Only this crate talks to the terminal and uses `anyhow`.

mod bench;
mod certificates;
mod check;
mod config;
mod esi;
mod generate;
mod keys;
mod logs;
mod reload;
mod serve;
mod upgrade;

use clap::{CommandFactory, Parser, Subcommand};

/// `tessera --version`: the crate's version and the git commit it was built from
/// (`build.rs`; "unknown" outside a git checkout).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("TESSERA_COMMIT"), ")");

/// jemalloc, not glibc's malloc: tokio allocates each connection's task and reactor
/// registration 128-byte aligned, and glibc's `posix_memalign` leaves a gap around each,
/// so an idle connection cost 989 bytes of RSS with it and 653 with jemalloc, whose size
/// classes are aligned already (docs/benchmarks.md, issue 27). Its memory is also
/// handed back after a burst of connections, where glibc's stayed fragmented.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "tessera",
    version = VERSION,
    about = "A fast, trustworthy web edge server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Each subcommand lives in its own module with its own `Args` and `run`.
#[derive(Subcommand)]
enum Command {
    /// Serve a site: static files, an ESI proxy and its cache, Lua handlers
    Serve(serve::Args),
    /// Check a configuration without starting the server
    #[command(
        after_help = "Reads the configuration as `serve` would (the file, with these options over it)
and checks everything `serve` would refuse at start, binding nothing: values, the
directories and files they name, upstream and host names, scripts (compiled). Prints
`configuration OK`, or every problem as FILE:LINE: key: what is wrong and exits 1.
`tessera serve --check` does the same with every option of `serve`.

Examples:
  tessera check-config --config tessera.toml
  tessera check-config --config tessera.toml --root site --script /api=api.lua

Documentation: docs/operations.md (\"Check a configuration\"), docs/config.md"
    )]
    CheckConfig(serve::ConfigArgs),
    /// Check or render an ESI template offline.
    Esi(esi::Args),
    /// Analyse access logs: Wide Finder `top` and a full `report`.
    Logs(logs::Args),
    /// Load-test an HTTP server: closed and open models, reports, A/B comparison.
    Bench(Box<bench::Args>),
    /// Write man pages or print shell completions (for packages).
    #[command(hide = true)]
    Generate(generate::Args),
}

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::CheckConfig(args) => serve::run(serve::Args::checking(args)),
        Command::Esi(args) => esi::run(args),
        Command::Logs(args) => logs::run(args),
        Command::Bench(args) => bench::run(*args),
        Command::Generate(args) => generate::run(args, Cli::command()),
    };
    if let Err(e) = result {
        eprintln!("tessera: error: {e:#}");
        std::process::exit(1);
    }
}
