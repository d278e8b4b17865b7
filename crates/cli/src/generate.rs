//! `tessera generate`: what a package installs beside the binary, made from the same
//! argument definitions as the binary itself so that it cannot drift: a man page per
//! command and subcommand (clap_mangen) and shell completions (clap_complete).
//! Hidden from `--help`; `scripts/package.sh` runs it.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Command;
use clap_complete::Shell;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// Write tessera.1, tessera-serve.1, ... (one per command and subcommand) into DIR
    Man { dir: PathBuf },
    /// Print the completion script for SHELL (bash, zsh, fish, elvish, powershell)
    Completions { shell: Shell },
}

pub fn run(args: Args, command: Command) -> anyhow::Result<()> {
    match args.what {
        What::Man { dir } => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            let mut command = command;
            command.build();
            write_pages(&command, "tessera", &dir)
        }
        What::Completions { shell } => {
            let mut command = command;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "tessera", &mut script);
            match std::io::Write::write_all(&mut std::io::stdout(), &script) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(()),
            }
        }
    }
}

/// The page of `command` as `name.1`, then one per visible subcommand (`name-sub.1`).
fn write_pages(command: &Command, name: &str, dir: &Path) -> anyhow::Result<()> {
    let page = command.clone().name(name.to_string());
    let mut roff = Vec::new();
    clap_mangen::Man::new(page).render(&mut roff)?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, roff).with_context(|| format!("cannot write {}", path.display()))?;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir)?;
    }
    Ok(())
}
