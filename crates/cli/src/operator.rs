//! Finding and loading the operator policy file (DESIGN §5) for `run` and `policy`: `--policy
//! FILE`, else the default file if it exists, refused inside the workspace.

use std::path::Path;

use cordon_pipeline::policy::{self, OperatorPolicy, PolicyPath};

/// The operator policy and the file it came from (`None`: no file, the empty policy).
pub use cordon_engine::run::Operator;

/// Loads `flag`, else the default file if it exists. A file inside `workspace` (when there is
/// one: `cordon proxy` has none) is refused: agents can edit the workspace, and pipelines never
/// widen the operator's policy. The error is the whole message for the user (a usage error).
pub fn load(flag: Option<&Path>, workspace: Option<&Path>) -> Result<Operator, String> {
    load_text(flag, workspace).map(|(operator, _)| operator)
}

/// [`load`], and the exact text the policy was parsed from (`None`: no file was read), for a
/// caller that carries the policy elsewhere (a Kubernetes batch gives it to its pods): the file
/// is read once, so what is carried is what was checked.
pub fn load_text(
    flag: Option<&Path>,
    workspace: Option<&Path>,
) -> Result<(Operator, Option<String>), String> {
    let path = match flag {
        Some(file) => Some(PolicyPath::Given(file.to_path_buf())),
        None => policy::default_path(
            std::env::var_os("XDG_CONFIG_HOME").as_deref(),
            std::env::var_os("HOME").as_deref(),
        )
        .map(PolicyPath::Default),
    };
    let Some(path) = path else {
        let operator = Operator {
            policy: OperatorPolicy::default(),
            path: None,
        };
        return Ok((operator, None));
    };
    let file = match &path {
        PolicyPath::Given(file) | PolicyPath::Default(file) => file.clone(),
    };
    let absolute = std::path::absolute(&file).unwrap_or_else(|_| file.clone());
    // The file's real place (the kernel takes `link/..` through the link), and its spelling with
    // `..` taken away lexically (`../policy.toml` from inside the workspace is outside it): both
    // are checked, and the real place is what is loaded, so a link cannot make the checked path
    // and the loaded one differ.
    let spelled = lexical(&absolute);
    let resolved = absolute.canonicalize().unwrap_or_else(|_| spelled.clone());
    if let Some(workspace) = workspace
        && (resolved.starts_with(workspace) || spelled.starts_with(workspace))
    {
        return Err(format!(
            "the operator policy file {} is inside the workspace {}, where agents can change it; \
             move it outside the workspace (for example to ~/.config/cordon/policy.toml)",
            file.display(),
            workspace.display()
        ));
    }
    let path = match path {
        PolicyPath::Given(_) => PolicyPath::Given(resolved.clone()),
        PolicyPath::Default(_) => PolicyPath::Default(resolved.clone()),
    };
    let kept = Kept::default();
    let policy = policy::load(&path, &kept).map_err(|diagnostics| {
        let text: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
        format!(
            "the operator policy is invalid; fix it:\n{}",
            text.join("\n")
        )
    })?;
    let operator = Operator {
        policy,
        path: Some(resolved),
    };
    Ok((operator, kept.0.into_inner()))
}

/// Reads through [`cordon_pipeline::Disk`] (regular files only, bounded) and keeps the text read.
#[derive(Default)]
struct Kept(std::cell::RefCell<Option<String>>);

impl cordon_pipeline::Files for Kept {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        let text = cordon_pipeline::Disk.read(path)?;
        *self.0.borrow_mut() = Some(text.clone());
        Ok(text)
    }
}

/// `path` with `.` and `..` taken away by its components alone (the canonical path, checked as
/// well, is where links lead).
fn lexical(path: &Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn dot_dot_is_taken_away_by_components() {
        for (path, want) in [
            ("/ws/../policy.toml", "/policy.toml"),
            ("/ws/sub/../policy.toml", "/ws/policy.toml"),
            ("/ws/./a/../../../x", "/x"),
            ("/a/b", "/a/b"),
        ] {
            assert_eq!(
                super::lexical(std::path::Path::new(path)),
                std::path::Path::new(want)
            );
        }
    }
}
