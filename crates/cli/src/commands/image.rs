//! `cordon image import FILE [--name NAME]`, `cordon image ls [--json]`, `cordon image rm REF`:
//! the environment images steps run on (DESIGN §14). The store is `<state-dir>/images`; the
//! importing, verifying and unpacking are `cordon-image`'s.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use cordon_image::{ImageError, Images, Limits};
use cordon_protocol::text::escape_line;

use crate::state_dir::StateDirArg;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Import a docker-archive (`docker save`, `podman save`) or an OCI image layout (directory
    /// or tar): every blob verified, the layers unpacked into the image store.
    Import(ImportArgs),
    /// List the images in the store: names, digest, size.
    Ls(LsArgs),
    /// Remove a name (and its image, when no other name holds it) or, by digest, an image and
    /// all its names.
    Rm(RmArgs),
}

#[derive(Debug, clap::Args)]
struct ImportArgs {
    /// The archive: a tar file or an OCI layout directory
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The name steps use (`image: NAME`); default: the archive's own tag, else the file name
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    #[command(flatten)]
    state_dir: StateDirArg,
}

#[derive(Debug, clap::Args)]
struct LsArgs {
    /// One JSON object per line: {"digest","names","os","architecture","path","layers","size","entries","imported"}
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state_dir: StateDirArg,
}

#[derive(Debug, clap::Args)]
struct RmArgs {
    /// An image name or `sha256:<digest>`
    #[arg(value_name = "REF")]
    reference: String,
    #[command(flatten)]
    state_dir: StateDirArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Import(args) => import(&args),
        Command::Ls(args) => ls(&args),
        Command::Rm(args) => rm(&args),
    }
}

/// An image error: a store or disk failure is exit 1, anything about the input exit 2.
fn failed(err: &ImageError) -> ExitCode {
    eprintln!("cordon: {}", cordon_engine::error_chain(err));
    match err {
        ImageError::Io { .. } => ExitCode::from(1),
        _ => ExitCode::from(2),
    }
}

fn import(args: &ImportArgs) -> anyhow::Result<ExitCode> {
    let Ok(state_dir) = args.state_dir.resolve() else {
        return Ok(ExitCode::from(2));
    };
    let images = Images::at(state_dir.path());
    let imported = match images.import(&args.file, args.name.as_deref(), &Limits::default()) {
        Ok(imported) => imported,
        Err(err) => return Ok(failed(&err)),
    };
    let skipped = imported.info.skipped;
    if skipped.setuid > 0 {
        eprintln!(
            "cordon: dropped the setuid/setgid bit of {} file(s); the sandbox never runs as root",
            skipped.setuid
        );
    }
    if skipped.git > 0 || skipped.special > 0 {
        eprintln!(
            "cordon: left out {} entr(ies) named .git and {} FIFO(s) or socket(s)",
            skipped.git, skipped.special
        );
    }
    println!(
        "imported {} {}",
        escape_line(&imported.name),
        imported.info.digest
    );
    Ok(ExitCode::SUCCESS)
}

fn ls(args: &LsArgs) -> anyhow::Result<ExitCode> {
    let Ok(state_dir) = args.state_dir.resolve() else {
        return Ok(ExitCode::from(2));
    };
    let images = Images::at(state_dir.path());
    let listed = match images.list() {
        Ok(listed) => listed,
        Err(err) => return Ok(failed(&err)),
    };
    if listed.is_empty() && !args.json {
        eprintln!(
            "cordon: no images in {} yet; import one with `cordon image import FILE --name NAME`",
            escape_line(&images.dir().display().to_string())
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    for info in &listed {
        let written = if args.json {
            writeln!(out, "{}", serde_json::to_string(info)?)
        } else {
            let names = if info.names.is_empty() {
                "<no name>".to_owned()
            } else {
                info.names.join(", ")
            };
            let short = info.digest.get(..19).unwrap_or(&info.digest);
            writeln!(
                out,
                "{:<32} {}  {:>10}  {} layer(s)",
                escape_line(&names),
                short,
                cordon_sandbox::cache::shown_size(info.size),
                info.layers
            )
        };
        if written.is_err() {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn rm(args: &RmArgs) -> anyhow::Result<ExitCode> {
    let Ok(state_dir) = args.state_dir.resolve() else {
        return Ok(ExitCode::from(2));
    };
    let images = Images::at(state_dir.path());
    match images.remove(&args.reference) {
        Ok(removed) => {
            let names: Vec<String> = removed
                .names
                .iter()
                .map(|n| escape_line(n).into_owned())
                .collect();
            if removed.image {
                println!("removed {} {}", names.join(" "), removed.digest);
            } else {
                println!(
                    "removed the name {} (the image {} keeps its other names)",
                    names.join(" "),
                    removed.digest
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => Ok(failed(&err)),
    }
}
