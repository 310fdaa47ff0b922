//! `cordon cache ls` and `cordon cache clear [NAME]`: the persistent download caches of
//! `isolation.caches` and `cordon exec --cache` (DESIGN §11). Sizes come from a bounded walk that
//! follows no link (`cordon_workspace::tree`); clearing empties a cache the same way and leaves
//! one a running session holds alone.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use cordon_protocol::text::escape_line;
use cordon_sandbox::cache::{self, Cache, Owner, Store, shown_size};

use crate::state_dir::StateDirArg;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// List every cache with its size and the pipeline (or exec workspace) it belongs to.
    Ls(LsArgs),
    /// Empty and remove caches: all of them, those named NAME, or one pipeline's or workspace's.
    Clear(ClearArgs),
}

#[derive(Debug, clap::Args)]
struct LsArgs {
    /// One JSON object per line: {"key","name","bytes","entries","origin"}
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state_dir: StateDirArg,
}

#[derive(Debug, clap::Args)]
struct ClearArgs {
    /// Only the caches of this tool: cargo, pip, npm, go or uv
    #[arg(value_name = "NAME")]
    name: Option<String>,
    /// Only the caches of this pipeline file
    #[arg(long, value_name = "FILE", conflicts_with = "workspace")]
    pipeline: Option<PathBuf>,
    /// Only the `cordon exec --cache` caches of this workspace
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    #[command(flatten)]
    state_dir: StateDirArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Ls(args) => ls(&args),
        Command::Clear(args) => clear(&args),
    }
}

fn ls(args: &LsArgs) -> anyhow::Result<ExitCode> {
    let Ok(state_dir) = args.state_dir.resolve() else {
        return Ok(ExitCode::from(2));
    };
    let store = Store::new(state_dir.path());
    let found = store.list()?;
    let mut out = std::io::stdout().lock();
    if found.is_empty() && !args.json {
        eprintln!(
            "cordon: no caches in {} yet; name some in `isolation.caches` or pass `cordon exec \
             --cache NAME`",
            escape_line(&store.root().display().to_string())
        );
        return Ok(ExitCode::SUCCESS);
    }
    for listed in &found {
        let written = if args.json {
            let (bytes, entries) = match &listed.held {
                Ok(usage) => (Some(usage.bytes), Some(usage.entries)),
                Err(_) => (None, None),
            };
            let line = serde_json::json!({
                "key": listed.key,
                "name": listed.cache.name(),
                "bytes": bytes,
                "entries": entries,
                "origin": listed.origin,
            });
            writeln!(out, "{line}")
        } else {
            let size = match &listed.held {
                Ok(usage) => shown_size(usage.bytes),
                Err(err) => format!("unsized ({err})"),
            };
            writeln!(
                out,
                "{:<6} {:>12}  {}",
                listed.cache.name(),
                size,
                escape_line(&listed.origin)
            )
        };
        // A closed pipe (`| head -1`) ends the listing quietly.
        if written.is_err() {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn clear(args: &ClearArgs) -> anyhow::Result<ExitCode> {
    let usage = |message: String| {
        eprintln!("cordon: {message}");
        Ok(ExitCode::from(2))
    };
    let only = match &args.name {
        None => None,
        Some(name) => match Cache::parse(name) {
            Some(cache) => Some(cache),
            None => {
                return usage(format!(
                    "`{}` is not a cache; use {}",
                    escape_line(name),
                    cache::NAMES
                ));
            }
        },
    };
    let owner = match (&args.pipeline, &args.workspace) {
        (Some(file), _) => match file.canonicalize() {
            Ok(path) => Some(Owner::Pipeline(path)),
            Err(err) => {
                return usage(format!(
                    "cannot find the pipeline {}: {err}",
                    escape_line(&file.display().to_string())
                ));
            }
        },
        (None, Some(dir)) => match dir.canonicalize() {
            Ok(path) => Some(Owner::Exec(path)),
            Err(err) => {
                return usage(format!(
                    "cannot find the workspace {}: {err}",
                    escape_line(&dir.display().to_string())
                ));
            }
        },
        (None, None) => None,
    };
    let Ok(state_dir) = args.state_dir.resolve() else {
        return Ok(ExitCode::from(2));
    };
    let cleared = Store::new(state_dir.path()).clear(owner.as_ref(), only)?;
    if cleared.is_empty() {
        eprintln!("cordon: no caches matched; `cordon cache ls` lists them");
        return Ok(ExitCode::SUCCESS);
    }
    let mut busy = false;
    for entry in &cleared {
        let origin = escape_line(&entry.origin);
        if let Some(problem) = &entry.failed {
            busy = true;
            eprintln!("cordon: {}", escape_line(problem));
            continue;
        }
        match &entry.held {
            Some(held) => {
                let size = held
                    .as_ref()
                    .map_or_else(|err| format!("unsized: {err}"), |u| shown_size(u.bytes));
                eprintln!("cleared {} ({size}) of {origin}", entry.cache.name());
            }
            None => {
                busy = true;
                eprintln!(
                    "cordon: the {} cache of {origin} is in use by a running session; not \
                     cleared — run this again when it ends",
                    entry.cache.name()
                );
            }
        }
    }
    Ok(ExitCode::from(u8::from(busy)))
}
