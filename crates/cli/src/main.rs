//! The `tessera` binary: argument parsing, config loading and wiring of the library
//! crates. Only this crate talks to the terminal and uses `anyhow`.

use clap::{Parser, Subcommand};

mod bench;

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
    Bench(bench::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => bench::run(args),
    }
}
