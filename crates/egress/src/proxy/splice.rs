//! Moving payload bytes from one TCP socket to another with `splice(2)` through a pipe, so the
//! kernel hands pages from socket to socket and the proxy never copies them through user space.
//!
//! Why: on loopback a user-space copy loop costs two copies and two system calls per buffer, and
//! on a small machine the proxy then competes with its own client and upstream for the CPU; the
//! benchmark (`bench/proxy-throughput.sh`) is where this paid off. If a pipe cannot be made (file
//! descriptor limit), callers fall back to a buffer copy.
//!
//! Readiness goes through tokio (`readable`/`writable` + `try_io`), so a `WouldBlock` clears the
//! readiness tokio cached and the task sleeps until the socket is ready again.

use std::io;
use std::os::fd::OwnedFd;

use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// A pipe used as the in-kernel buffer between two sockets.
pub(super) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

const FLAGS: SpliceFlags = SpliceFlags::MOVE.union(SpliceFlags::NONBLOCK);

impl Pipe {
    /// A non-blocking pipe, grown towards `capacity` bytes when the system allows it (the
    /// default is 64 KiB; `/proc/sys/fs/pipe-max-size` bounds unprivileged users).
    pub(super) fn new(capacity: usize) -> io::Result<Pipe> {
        let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        let capacity = rustix::pipe::fcntl_setpipe_size(&write, capacity)
            .or_else(|_| rustix::pipe::fcntl_getpipe_size(&write))
            .unwrap_or(64 * 1024);
        Ok(Pipe {
            read,
            write,
            capacity,
        })
    }

    /// Waits for `from` to be readable and moves up to `max` bytes from it into the (empty) pipe.
    /// Returns 0 at end of stream. Cancel-safe: bytes leave the socket only inside the
    /// synchronous `splice` call.
    pub(super) async fn fill(&mut self, from: &TcpStream, max: u64) -> io::Result<usize> {
        let want = usize::try_from(max)
            .unwrap_or(usize::MAX)
            .min(self.capacity);
        loop {
            from.readable().await?;
            let moved = from.try_io(Interest::READABLE, || {
                rustix::pipe::splice(from, None, &self.write, None, want, FLAGS)
                    .map_err(io::Error::from)
            });
            match moved {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Moves `n` bytes (what the last [`Pipe::fill`] returned) from the pipe into `to`. Not
    /// cancel-safe: a caller that stops waiting must drop the pipe and the connection.
    pub(super) async fn drain(&mut self, to: &TcpStream, n: usize) -> io::Result<()> {
        let mut left = n;
        while left > 0 {
            to.writable().await?;
            let moved = to.try_io(Interest::WRITABLE, || {
                rustix::pipe::splice(&self.read, None, to, None, left, FLAGS)
                    .map_err(io::Error::from)
            });
            match moved {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(k) => left -= k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
