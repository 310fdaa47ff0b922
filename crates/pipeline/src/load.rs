//! Entry points: read a pipeline file and the agent files it names, and check everything.

use std::io;
use std::path::{Path, PathBuf};

use crate::diagnostic::{Diagnostics, FileSink, Position, Sink};
use crate::model::Pipeline;
use crate::{Agent, AgentName, RelPath, agent, validate, yaml};

/// Where files come from: the disk for the cli, a map in tests and the fuzzer.
pub trait Files {
    fn read(&self, path: &Path) -> io::Result<String>;
}

/// Reads files from the file system (the only IO this crate does): regular files only, at most
/// [`MAX_FILE`] bytes, so `cordon validate /dev/zero` or a FIFO cannot hang or exhaust it. (A run
/// reads its pipeline through the workspace view instead.)
#[derive(Clone, Copy, Debug, Default)]
pub struct Disk;

/// The largest pipeline, agent or policy file read.
pub const MAX_FILE: u64 = 4 << 20;

impl Files for Disk {
    fn read(&self, path: &Path) -> io::Result<String> {
        use std::io::Read;
        let metadata = std::fs::metadata(path)?;
        if !metadata.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "it is not a regular file",
            ));
        }
        let mut bytes = Vec::new();
        std::fs::File::open(path)?
            .take(MAX_FILE + 1)
            .read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_FILE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("it is larger than {MAX_FILE} bytes"),
            ));
        }
        String::from_utf8(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
    }
}

impl Files for std::collections::BTreeMap<PathBuf, String> {
    fn read(&self, path: &Path) -> io::Result<String> {
        self.get(path)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
}

/// A valid pipeline and the warnings it produced.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub pipeline: Pipeline,
    /// Only warnings: a pipeline with errors is not `Loaded`.
    pub warnings: Diagnostics,
}

/// Reads and checks `path` and every agent file it names. On failure, every diagnostic (errors
/// and warnings, in file/line/column order).
pub fn load(path: &Path, files: &impl Files) -> Result<Loaded, Diagnostics> {
    let display = path.display().to_string();
    let mut sink = Sink::default();
    let text = match files.read(path) {
        Ok(text) => text,
        Err(err) => {
            sink.file(&display)
                .file_error(read_error(&err, "pipeline file"));
            return Err(sink.finish());
        }
    };
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let pipeline = check(&mut sink, &display, &text, &base, files);
    match pipeline {
        Some(pipeline) if !sink.has_errors() => Ok(Loaded {
            pipeline,
            warnings: sink.finish(),
        }),
        _ => Err(sink.finish()),
    }
}

/// Checks pipeline text as if read from `display`; agent files are read through `files`
/// relative to `base`. The fuzzer and the benchmark call this directly.
pub fn load_str(
    display: &str,
    text: &str,
    base: &Path,
    files: &impl Files,
) -> Result<Loaded, Diagnostics> {
    let mut sink = Sink::default();
    let pipeline = check(&mut sink, display, text, base, files);
    match pipeline {
        Some(pipeline) if !sink.has_errors() => Ok(Loaded {
            pipeline,
            warnings: sink.finish(),
        }),
        _ => Err(sink.finish()),
    }
}

fn check(
    sink: &mut Sink,
    display: &str,
    text: &str,
    base: &Path,
    files: &impl Files,
) -> Option<Pipeline> {
    let mut out = sink.file(display);
    let root = match yaml::parse(text, 0) {
        Ok(root) => root,
        Err(err) => {
            out.error(err.at, err.message);
            return None;
        }
    };
    let mut loader = |out: &mut FileSink<'_>, name: &AgentName, at: Position, dir: &RelPath| {
        load_agent(out, name, at, base, dir, files)
    };
    validate::pipeline(&mut out, &root, &mut loader)
}

fn load_agent(
    out: &mut FileSink<'_>,
    name: &AgentName,
    at: Position,
    base: &Path,
    dir: &RelPath,
    files: &impl Files,
) -> Option<Agent> {
    let relative = dir.as_path().join(name.file_name());
    let path = base.join(&relative);
    match files.read(&path) {
        Ok(text) => {
            let display = path.display().to_string();
            let mut agent_out = out.other(&display);
            let agent = agent::parse(&mut agent_out, &text, name);
            if agent.is_none() {
                out.error(at, format!("agent `{name}` is unusable because of the problems in `{display}`; fix them"));
            }
            agent
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            out.error(
                at,
                format!(
                    "agent file `{}` does not exist; create it with front matter `name: {name}` (see `cordon init`) or fix `agent`",
                    relative.display()
                ),
            );
            None
        }
        Err(err) => {
            out.error(
                at,
                format!(
                    "agent file `{}`: {}",
                    relative.display(),
                    read_error(&err, "agent file")
                ),
            );
            None
        }
    }
}

fn read_error(err: &io::Error, what: &str) -> String {
    match err.kind() {
        io::ErrorKind::NotFound => format!("the {what} does not exist; check the path"),
        io::ErrorKind::PermissionDenied => {
            format!("the {what} cannot be read (permission denied); check its permissions")
        }
        io::ErrorKind::InvalidData => format!("the {what} is not UTF-8 text; save it as UTF-8"),
        _ => format!("the {what} cannot be read: {err}"),
    }
}
