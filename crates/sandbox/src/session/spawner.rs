//! The one long-lived thread that clones every session's init.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that created a child exits, not the process. If
//! whichever thread opened a session cloned its init, a short-lived worker thread ending would
//! kill a healthy session. So all clones happen here, on a thread that lives as long as the
//! process; a session's init then dies exactly when the host process does.
//!
//! Except when the session asks for [`InitStart::InProcessWhenSingleThreaded`] and the caller is
//! the process's only thread (a one-shot `cordon exec`): then it clones init itself — its thread
//! *is* the process, so the parent-death signal is still tied to the process — and init runs in the
//! child without exec'ing the binary again (see `sys::spawn::Start`), which is sound only because
//! no other thread exists to hold a lock the child would inherit. A process with any other thread
//! (the spawner included, once started) always goes through the spawner and an exec'd init.

use std::io;
use std::sync::OnceLock;
use std::sync::mpsc::{self, Sender};

use crate::config::InitStart;
use crate::sys::process::single_threaded;
use crate::sys::spawn::{self, InitImage, Spawned, Start};

struct Request {
    image: InitImage,
    flags: libc::c_int,
    reply: Sender<io::Result<Spawned>>,
}

/// Clones `image` with `flags` on the spawner thread, starting the thread on first use (or on
/// this thread, to run init without exec, as `start` allows; see the module documentation).
pub(crate) fn clone_init(
    mut image: InitImage,
    flags: libc::c_int,
    start: InitStart,
) -> io::Result<Spawned> {
    // No thread can appear between this check and the clone: we are the only one that could
    // start it.
    if start == InitStart::InProcessWhenSingleThreaded && single_threaded() {
        image.set_start(Start::InProcess(crate::init::main_in_process));
        return spawn::clone_init(&image, flags);
    }
    static SPAWNER: OnceLock<io::Result<Sender<Request>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (send, receive) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("cordon-spawner".into())
            .spawn(move || {
                for request in receive {
                    let result = spawn::clone_init(&request.image, request.flags);
                    let _ = request.reply.send(result);
                }
            })?;
        Ok(send)
    });
    let spawner = spawner
        .as_ref()
        .map_err(|e| io::Error::new(e.kind(), e.to_string()))?;
    let (reply, result) = mpsc::channel();
    spawner
        .send(Request {
            image,
            flags,
            reply,
        })
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    result
        .recv()
        .map_err(|_| io::Error::other("the spawner thread is gone"))?
}
