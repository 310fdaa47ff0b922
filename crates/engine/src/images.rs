//! The environment images of a run (DESIGN §14, §18): every image reference the pipeline uses,
//! resolved once when the run starts (or resumes) to the root filesystem it names, so a step's
//! session opens on exactly that tree. A resumed run keeps the digest it recorded: a reference
//! a step already ran on (`sandbox.session{image}`) stays pinned to that digest even if the name
//! was imported again since.

use std::collections::HashMap;
use std::path::PathBuf;

use cordon_image::{ImageError, Images};
use cordon_pipeline::Pipeline;
use cordon_protocol::{Event, ImageRef, Record, StepName};

/// One resolved image, as a session gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionImage {
    /// What `sandbox.session{image}` records: `sha256:<hex>`, or the directory of a path image.
    pub recorded: String,
    pub rootfs: PathBuf,
    /// The image's `PATH`.
    pub path: Option<String>,
    /// `isolation.image_writable`.
    pub writable: bool,
}

/// Why a run cannot start on its images (exit 2: the fix is the user's).
#[derive(Debug, thiserror::Error)]
pub enum RunImageError {
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(
        "`image: {path}` is a directory, which a pipeline may name only when the operator policy \
         lists it under `[images] paths`; add it there, or import the image (`cordon image import \
         FILE --name NAME`) and name it"
    )]
    PathNotAllowed { path: String },
    #[error(
        "this run started on the image {recorded}, which is no longer in the image store; import \
         it again (`cordon image import FILE`) to resume, or start a new run"
    )]
    RecordedGone { recorded: String },
}

/// Every image reference of one run, resolved.
#[derive(Clone, Debug, Default)]
pub struct RunImages {
    resolved: HashMap<ImageRef, SessionImage>,
}

impl RunImages {
    /// Resolves every reference `pipeline` uses through `images`: pinned first to the digests
    /// `log` (the run's events so far) recorded for the steps that used them, the rest as the
    /// store has them now. A directory reference needs `allowed_paths` (`[images] paths`).
    pub fn resolve(
        pipeline: &Pipeline,
        images: &Images,
        allowed_paths: &[String],
        log: &[Record],
    ) -> Result<RunImages, RunImageError> {
        let writable = pipeline.isolation.image_writable;
        let mut resolved = HashMap::new();
        for record in log {
            let Event::SandboxSession {
                step,
                image: Some(recorded),
                ..
            } = &record.event
            else {
                continue;
            };
            let Some(reference) = reference_of(pipeline, step) else {
                continue;
            };
            if resolved.contains_key(&reference) {
                continue;
            }
            let pinned = ImageRef::parse(recorded).map_err(|_| RunImageError::RecordedGone {
                recorded: recorded.clone(),
            })?;
            let image = images
                .resolve(&pinned)
                .map_err(|_| RunImageError::RecordedGone {
                    recorded: recorded.clone(),
                })?;
            resolved.insert(reference, session_image(image, writable));
        }
        let mut references: Vec<&ImageRef> = pipeline
            .sandboxed()
            .into_iter()
            .filter_map(|s| s.image.as_ref())
            .collect();
        references.extend(pipeline.isolation.image.as_ref());
        for reference in references {
            if resolved.contains_key(reference) {
                continue;
            }
            if let ImageRef::Path(path) = reference
                && !allowed_paths.contains(path)
            {
                return Err(RunImageError::PathNotAllowed { path: path.clone() });
            }
            let image = images.resolve(reference)?;
            resolved.insert(reference.clone(), session_image(image, writable));
        }
        Ok(RunImages { resolved })
    }

    /// A run whose images are `resolved` already (tests, benchmarks).
    pub fn from_resolved(resolved: HashMap<ImageRef, SessionImage>) -> RunImages {
        RunImages { resolved }
    }

    /// The image `reference` resolved to; `None` when the run did not resolve it (a reference
    /// that is not the pipeline's).
    pub fn get(&self, reference: &ImageRef) -> Option<&SessionImage> {
        self.resolved.get(reference)
    }
}

fn session_image(image: cordon_image::Resolved, writable: bool) -> SessionImage {
    SessionImage {
        recorded: image.recorded,
        rootfs: image.rootfs,
        path: image.path,
        writable,
    }
}

/// The image reference step `name` runs on, as the pipeline says: a written step's own, an
/// outcome phase's; `None` for a verify step (whose commands may each name another).
fn reference_of(pipeline: &Pipeline, name: &StepName) -> Option<ImageRef> {
    if let Some(step) = pipeline.steps.iter().find(|s| &s.name == name) {
        return step.kind.sandbox().and_then(|s| s.image.clone());
    }
    let outcome = pipeline.outcome.as_ref()?;
    let phase = match name.task() {
        Some((_, phase)) => phase,
        None => name.as_str(),
    };
    outcome.phase(phase).and_then(|a| a.sandbox.image.clone())
}
