//! The run's tooling (DESIGN §3): the pipeline, its agent files, its context files and a replay
//! transcript. At start they are read through the workspace view (regular files only, bounded,
//! UTF-8), checked against HEAD, and kept as one [`ToolingSnapshot`] in the store; every later
//! read — the pipeline a resume loads, the agent prompts, the context a model is given — comes
//! from that snapshot, never from the agent-writable workspace.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use cordon_pipeline::{Files, Loaded, Pipeline};
use cordon_store::{RunRow, Store};
use cordon_workspace::{View, ViewError, WsPath};

use super::RunError;
use crate::ErrorClass;

/// The most bytes of one tooling file.
pub const MAX_TOOLING: usize = 4 << 20;

/// Every tooling file's text by workspace-relative path. Stored as a JSON object
/// `{path: text}`, the one form both a fresh and a resumed run decode.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct ToolingSnapshot {
    files: BTreeMap<String, String>,
}

impl ToolingSnapshot {
    /// Reads `paths` through `view` (each a regular file of at most [`MAX_TOOLING`] bytes).
    pub fn read(view: &View, paths: &[WsPath]) -> Result<ToolingSnapshot, RunError> {
        let mut files = BTreeMap::new();
        for path in paths {
            let shown = path.to_string_lossy();
            let text = read_text(view, path).map_err(|err| {
                RunError::usage(format!("cannot read tooling file {shown}: {err}"))
            })?;
            files.insert(shown, text);
        }
        Ok(ToolingSnapshot { files })
    }

    /// The snapshot stored with `row`.
    pub fn stored(store: &Store, row: &RunRow) -> Result<ToolingSnapshot, RunError> {
        let bytes = row
            .snapshot
            .and_then(|id| store.blob(id).ok().flatten())
            .ok_or_else(|| {
                RunError::new(
                    ErrorClass::Runtime,
                    format!(
                        "run {} has no tooling snapshot; it cannot be resumed",
                        row.id
                    ),
                )
            })?;
        ToolingSnapshot::decode(&bytes).map_err(|e| {
            RunError::new(
                ErrorClass::Runtime,
                format!("the tooling snapshot of run {} is unreadable: {e}", row.id),
            )
        })
    }

    /// Every file: its path (relative, `/`-separated) and text.
    pub fn files(&self) -> impl Iterator<Item = (&str, &str)> {
        self.files.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<ToolingSnapshot, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The text of the tooling file at `relative` (to the workspace).
    pub fn text(&self, relative: &Path) -> Option<&str> {
        self.files
            .get(relative.to_string_lossy().as_ref())
            .map(String::as_str)
    }

    /// The pipeline `pipeline_file` (in `workspace`) and its agent files, from the snapshot.
    pub fn pipeline(&self, pipeline_file: &Path, workspace: &Path) -> Result<Loaded, RunError> {
        let files: BTreeMap<PathBuf, String> = self
            .files
            .iter()
            .map(|(k, v)| (workspace.join(k), v.clone()))
            .collect();
        cordon_pipeline::load(pipeline_file, &files).map_err(|diagnostics| RunError {
            class: ErrorClass::Usage,
            message: format!(
                "{} is invalid; fix the problems above",
                pipeline_file.display()
            ),
            details: diagnostics.iter().map(ToString::to_string).collect(),
        })
    }
}

/// `path` as UTF-8 text through the view.
fn read_text(view: &View, path: &WsPath) -> io::Result<String> {
    let read = view
        .read(path, MAX_TOOLING + 1)
        .map_err(|err| match err {
            ViewError::Io { source, .. } => source,
            other => io::Error::new(io::ErrorKind::InvalidInput, other.to_string()),
        })?
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    if read.bytes.len() > MAX_TOOLING {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is larger than {MAX_TOOLING} bytes"),
        ));
    }
    String::from_utf8(read.bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

/// The pipeline's files read through the workspace view (the load that finds the tooling).
struct ViewFiles<'a> {
    view: &'a View,
    workspace: &'a Path,
}

impl Files for ViewFiles<'_> {
    fn read(&self, path: &Path) -> io::Result<String> {
        let relative = path
            .strip_prefix(self.workspace)
            .map_err(|_| io::Error::from(io::ErrorKind::NotFound))?;
        let path = WsPath::new(&relative.to_string_lossy())
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err.to_string()))?;
        read_text(self.view, &path)
    }
}

/// The pipeline at `pipeline_file` loaded through `view` (to learn its tooling), with its
/// warnings as printable lines. `shown` is the path as the user gave it.
pub(super) fn load(
    view: &View,
    workspace: &Path,
    pipeline_file: &Path,
    shown: &Path,
) -> Result<FirstLoad, RunError> {
    let files = ViewFiles { view, workspace };
    match cordon_pipeline::load(pipeline_file, &files) {
        Ok(loaded) => Ok(FirstLoad {
            warnings: loaded.warnings.iter().map(ToString::to_string).collect(),
            pipeline: loaded.pipeline,
        }),
        Err(diagnostics) => Err(RunError {
            class: ErrorClass::Usage,
            message: format!("{} is invalid; fix the problems above", shown.display()),
            details: diagnostics.iter().map(ToString::to_string).collect(),
        }),
    }
}

pub(super) struct FirstLoad {
    pub(super) pipeline: Pipeline,
    pub(super) warnings: Vec<String>,
}

/// Whether every tooling path of the pipeline lies in `workspace` (none reached through `..`).
pub(super) fn all_inside(pipeline: &Pipeline, pipeline_file: &Path, workspace: &Path) -> bool {
    tooling_files(pipeline, pipeline_file, workspace)
        .iter()
        .all(|p| {
            p.strip_prefix(workspace).is_ok_and(|rest| {
                rest.components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
            })
        })
}

/// Workspace-relative tooling paths: the pipeline, its agent files, its context files and a
/// replay transcript.
pub fn tooling_paths(pipeline: &Pipeline, pipeline_file: &Path, workspace: &Path) -> Vec<WsPath> {
    let mut relative: Vec<WsPath> = tooling_files(pipeline, pipeline_file, workspace)
        .iter()
        .filter_map(|p| p.strip_prefix(workspace).ok())
        .filter_map(|p| WsPath::new(&p.to_string_lossy()).ok())
        .collect();
    relative.sort();
    relative.dedup();
    relative
}

/// The tooling files' paths as the pipeline names them (joined to its directory).
fn tooling_files(pipeline: &Pipeline, pipeline_file: &Path, workspace: &Path) -> Vec<PathBuf> {
    let base = pipeline_file.parent().unwrap_or(workspace);
    let mut paths = vec![pipeline_file.to_path_buf()];
    for agent in pipeline.agent_steps() {
        paths.push(
            base.join(pipeline.agents_dir.as_path())
                .join(agent.agent.file_name()),
        );
    }
    paths.extend(
        pipeline
            .context_files
            .iter()
            .map(|p| base.join(p.as_path())),
    );
    if let Some(cordon_pipeline::Llm::Replay { transcript, .. }) = &pipeline.llm {
        paths.push(base.join(transcript.as_path()));
    }
    paths
}
