//! The `tessera` binary: argument parsing, config loading and wiring of the library
//! crates. Only this crate talks to the terminal and uses `anyhow`.

use clap::{Parser, Subcommand};

mod esi;

#[derive(Parser)]
#[command(
    name = "tessera",
    version,
    about = "A fast, trustworthy web edge server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Each subcommand lives in its own module with its own `Args` and `run`.
#[derive(Subcommand)]
enum Command {
    /// Check or render an ESI template offline.
    Esi(esi::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Esi(args) => esi::run(args),
    }
}
