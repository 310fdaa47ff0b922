//! The messages between the host and a session's init, and their framing: a little-endian `u32`
//! length, then that many bytes of JSON, over a stream socket pair; descriptors ride along as
//! `SCM_RIGHTS` on the first byte of a frame. One typed enum per direction, never ad-hoc bytes.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::limits::Limits;
use crate::mounts::MountPlan;
use crate::sys::fd as sysfd;
use crate::sys::process::WorkloadStage;

/// The largest frame either side accepts (an argv near ARG_MAX fits).
const MAX_FRAME: usize = 8 << 20;

/// Host → init.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToInit {
    /// Build the root and get ready; carries the descriptors the plan indexes.
    Setup(Box<Setup>),
    /// Start a workload; carries stdin, stdout and stderr, in that order.
    Exec(ExecSpec),
    /// Stop and kill the running workload and every process below it.
    KillTree,
}

/// Init → host.
#[derive(Debug, Serialize, Deserialize)]
pub enum FromInit {
    /// The root is built and sealed; execs may come.
    Ready,
    /// Setting up failed; nothing ran. The text names the step and the cause.
    SetupFailed { message: String },
    /// The workload could not be started (`stage`, `errno`); nothing of it ran.
    SpawnFailed { stage: WorkloadStage, errno: i32 },
    /// The workload runs on a pseudo-terminal; its master comes with this message.
    Terminal,
    /// The workload ended with an exit code or a signal.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
}

/// What init needs to build the session.
#[derive(Debug, Serialize, Deserialize)]
pub struct Setup {
    pub plan: MountPlan,
    pub hostname: String,
    /// Landlock: readable and executable beneath these.
    pub read_exec: Vec<PathBuf>,
    /// Landlock: writable beneath these.
    pub read_write: Vec<PathBuf>,
    /// Landlock: device files that may be opened.
    pub devices: Vec<PathBuf>,
    /// The session's own per-user kernel limits, set before the first workload.
    pub limits: Limits,
}

/// One workload.
#[derive(Debug, Serialize, Deserialize)]
pub struct ExecSpec {
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    /// Run on a new pseudo-terminal of this size (`cordon exec -t`): init makes the pair, the
    /// command gets the slave as stdin, stdout, stderr and controlling terminal, the host gets
    /// the master ([`FromInit::Terminal`]). No descriptors come with the message then.
    #[serde(default)]
    pub terminal: Option<crate::sys::pty::WindowSize>,
}

/// A path of any bytes in a message: a string when it is UTF-8 (every path but a masked
/// workspace name a step chose), else its bytes.
pub(crate) mod any_path {
    use std::ffi::OsString;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::path::{Path, PathBuf};

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Bytes(Vec<u8>),
    }

    pub fn serialize<S: Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
        match path.to_str() {
            Some(text) => Repr::Text(text.to_owned()),
            None => Repr::Bytes(path.as_os_str().as_bytes().to_vec()),
        }
        .serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<PathBuf, D::Error> {
        Ok(match Repr::deserialize(deserializer)? {
            Repr::Text(text) => PathBuf::from(text),
            Repr::Bytes(bytes) => PathBuf::from(OsString::from_vec(bytes)),
        })
    }
}

/// Writes one message with `fds` attached.
pub fn send<T: Serialize>(
    socket: BorrowedFd<'_>,
    message: &T,
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    let body = serde_json::to_vec(message).map_err(io::Error::other)?;
    if body.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "message too large",
        ));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    sysfd::send_with_fds(socket, &frame, fds)
}

/// Reads one message and the descriptors attached to it; `Ok(None)` when the peer has closed.
pub fn receive<T: DeserializeOwned>(socket: impl AsFd) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
    let socket = socket.as_fd();
    let mut fds = Vec::new();
    let mut header = [0u8; 4];
    if !sysfd::recv_with_fds(socket, &mut header, &mut fds)? {
        return Ok(None);
    }
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "frame too large",
        ));
    }
    let mut body = vec![0u8; len];
    if !sysfd::recv_with_fds(socket, &mut body, &mut fds)? && len > 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let message =
        serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Some((message, fds)))
}
