//! `cordon init [DIR]`: write a commented `pipeline.yaml` and `agents/dev.agent.md` to start
//! from; with `--outcome`, `outcome.yaml` and the five phase agents of an outcome run. Never
//! overwrites a file.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to write pipeline.yaml and agents/ (created if missing).
    #[arg(value_name = "DIR", default_value = ".")]
    dir: PathBuf,
    /// Write an outcome pipeline instead (`outcome.yaml` and its five agent files), for
    /// `cordon do "OUTCOME"`
    #[arg(long)]
    outcome: bool,
}

/// The scaffold: a dev → test → commit loop whose failing tests send the agent back with a retry.
pub const PIPELINE_YAML: &str = include_str!("init/pipeline.yaml");
pub const DEV_AGENT_MD: &str = include_str!("init/dev.agent.md");

/// The outcome scaffold: five phase agents (the executor is `dev`).
pub const OUTCOME_FILES: [(&str, &str); 6] = [
    ("outcome.yaml", include_str!("init/outcome.yaml")),
    (
        "agents/decompose.agent.md",
        include_str!("init/decompose.agent.md"),
    ),
    (
        "agents/planner.agent.md",
        include_str!("init/planner.agent.md"),
    ),
    ("agents/dev.agent.md", DEV_AGENT_MD),
    (
        "agents/critic.agent.md",
        include_str!("init/critic.agent.md"),
    ),
    (
        "agents/validator.agent.md",
        include_str!("init/validator.agent.md"),
    ),
];

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let steps: [(&str, &str); 2] = [
        ("pipeline.yaml", PIPELINE_YAML),
        ("agents/dev.agent.md", DEV_AGENT_MD),
    ];
    let files: &[(&str, &str)] = if args.outcome { &OUTCOME_FILES } else { &steps };
    // Check every target first so a refusal writes nothing.
    for (name, _) in files {
        let path = args.dir.join(name);
        if fs::symlink_metadata(&path).is_ok() {
            eprintln!(
                "cordon: {} already exists; cordon init never overwrites files: move it away or \
                 pick another directory",
                path.display()
            );
            return Ok(ExitCode::from(2));
        }
    }
    for (name, content) in files {
        let path = args.dir.join(name);
        write_new(&path, content)?;
        println!("wrote {}", path.display());
    }
    let file = files[0].0;
    let pipeline = args.dir.join(file);
    println!();
    println!("Commit these files: cordon runs only tracked, unmodified tooling files, e.g.");
    println!(
        "  git -C {} add {file} agents && git -C {} commit -m \"Add a cordon pipeline\"",
        shown(&args.dir),
        shown(&args.dir)
    );
    println!("Then check it and see its plan:");
    println!("  cordon validate {}", shown(&pipeline));
    println!("  cordon run {} --dry-run", shown(&pipeline));
    if args.outcome {
        println!("and start an outcome run from the directory holding it:");
        println!("  cordon do \"Add a --json flag to the report command\"");
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates `path` (and its parent directories) without ever replacing an existing file.
fn write_new(path: &Path, content: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)
            .with_context(|| format!("cannot create directory {}", parent.display()))?;
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| {
            format!(
                "cannot create {}; check the directory's permissions",
                path.display()
            )
        })?;
    file.write_all(content.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// A path as the user would type it back, quoted when the shell would split it.
fn shown(path: &Path) -> String {
    let text = path.display().to_string();
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-~+".contains(c))
    {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}
