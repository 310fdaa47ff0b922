//! The extra CA roots an upstream HTTPS client trusts (the file `SSL_CERT_FILE` names): read and
//! parsed in one place so the model lane and the agent's providers trust exactly the same roots.

use std::io;
use std::path::{Path, PathBuf};

/// Why the extra roots cannot be used. Each caller words it for its own setting.
#[derive(Debug, thiserror::Error)]
pub enum RootsError {
    #[error("cannot read the CA file `{}`: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the CA file `{}` holds no PEM certificate ({reason})", path.display())]
    Pem { path: PathBuf, reason: String },
}

/// The certificates of the PEM bundle at `path`, to add next to the bundled web PKI roots. A file
/// without a single certificate is refused: trusting nothing extra was not what its author meant.
pub fn extra_roots(path: &Path) -> Result<Vec<reqwest::Certificate>, RootsError> {
    let pem = std::fs::read(path).map_err(|source| RootsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| RootsError::Pem {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if certs.is_empty() {
        return Err(RootsError::Pem {
            path: path.to_path_buf(),
            reason: "no `BEGIN CERTIFICATE` block".to_owned(),
        });
    }
    Ok(certs)
}
