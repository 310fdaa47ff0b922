//! The one long-lived thread that clones every session's init.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that created a child exits, not the process. If
//! whichever thread opened a session cloned its init, a short-lived worker thread ending would
//! kill a healthy session. So all clones happen here, on a thread that lives as long as the
//! process; a session's init then dies exactly when the host process does.

use std::io;
use std::sync::OnceLock;
use std::sync::mpsc::{self, Sender};

use crate::sys::spawn::{self, InitImage, Spawned};

struct Request {
    image: InitImage,
    flags: libc::c_int,
    reply: Sender<io::Result<Spawned>>,
}

/// Clones `image` with `flags` on the spawner thread, starting the thread on first use.
pub(crate) fn clone_init(image: InitImage, flags: libc::c_int) -> io::Result<Spawned> {
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
