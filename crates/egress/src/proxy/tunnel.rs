//! A CONNECT tunnel: two copy loops, half-close passed through, one idle timeout for both
//! directions, and an error in either direction ending both.
//!
//! Why not `tokio::io::copy_bidirectional`: it has no idle timeout, and a tunnel whose peers both
//! stop sending would hold its slot forever; and it copies through user space. Each direction
//! here moves bytes with `splice(2)` through its own pipe of `Limits::buffer_bytes` (see
//! `splice.rs`), falling back to a buffer of that size when no pipe can be made.
//!
//! Why both directions stay async in the connection's task rather than on two blocking threads:
//! a thread-per-direction relay with blocking splice was built and measured against this one
//! and against a minimal blocking relay (`bench/splice-floor.py`); all three moved 1 GiB at the
//! same speed and the same CPU per byte (the proxy's time is the kernel's TCP work for the second
//! loopback hop, not readiness round-trips), so threads would only add two per tunnel.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::io;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;

use super::splice::Pipe;

/// The time of the last byte in either direction, as milliseconds since the tunnel opened.
struct Activity {
    opened: Instant,
    last: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        let now = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(now, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let now = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(now.saturating_sub(self.last.load(Ordering::Relaxed)))
    }
}

/// Copies both ways until both directions ended; returns (client → upstream, upstream →
/// client) payload bytes. `pending` (bytes the client pipelined after the CONNECT head) goes
/// upstream first.
pub(super) async fn run(
    client: (OwnedReadHalf, OwnedWriteHalf),
    upstream: (OwnedReadHalf, OwnedWriteHalf),
    pending: Vec<u8>,
    buffer: usize,
    idle: Duration,
) -> (u64, u64) {
    let activity = Activity {
        opened: Instant::now(),
        last: AtomicU64::new(0),
    };
    let (abort, _) = watch::channel(false);
    let up = pump(
        client.0, upstream.1, pending, buffer, idle, &activity, &abort,
    );
    let down = pump(
        upstream.0,
        client.1,
        Vec::new(),
        buffer,
        idle,
        &activity,
        &abort,
    );
    tokio::join!(up, down)
}

/// How one direction moves bytes: through a pipe with `splice`, or through a buffer when no
/// pipe could be made.
enum Mover {
    Splice(Pipe),
    Copy(Vec<u8>),
}

impl Mover {
    fn new(buffer: usize) -> Mover {
        match Pipe::new(buffer) {
            Ok(pipe) => Mover::Splice(pipe),
            Err(_) => Mover::Copy(vec![0u8; buffer.max(1024)]),
        }
    }

    /// Reads what is available (cancel-safe). 0 = end of stream.
    async fn read(&mut self, from: &OwnedReadHalf) -> io::Result<usize> {
        match self {
            Mover::Splice(pipe) => pipe.fill(from.as_ref(), u64::MAX).await,
            Mover::Copy(buf) => loop {
                from.readable().await?;
                match from.try_read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            },
        }
    }

    /// Writes the `n` bytes the last read produced.
    async fn write(&mut self, to: &mut OwnedWriteHalf, n: usize) -> io::Result<()> {
        match self {
            Mover::Splice(pipe) => pipe.drain(to.as_ref(), n).await,
            Mover::Copy(buf) => to.write_all(&buf[..n]).await,
        }
    }
}

/// One direction. At end of stream the write side is shut down, so the peer sees the half-close
/// and may still answer; on an error or an idle timeout the other direction is told to stop.
async fn pump(
    from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    pending: Vec<u8>,
    buffer: usize,
    idle: Duration,
    activity: &Activity,
    abort: &watch::Sender<bool>,
) -> u64 {
    let mut stop = abort.subscribe();
    let mut copied = 0u64;
    let mut clean = true;
    if !pending.is_empty() {
        match tokio::time::timeout(idle, to.write_all(&pending)).await {
            Ok(Ok(())) => copied += pending.len() as u64,
            _ => clean = false,
        }
    }
    let mut mover = Mover::new(buffer);
    while clean {
        let read = tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => { clean = false; break; }
            read = tokio::time::timeout(idle, mover.read(&from)) => read,
        };
        match read {
            // No byte this way for `idle`; the tunnel is idle only if none went the other way.
            Err(_) if activity.idle_for() < idle => continue,
            Err(_) | Ok(Err(_)) => clean = false,
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => {
                activity.touch();
                // Bytes are in flight now: a stop or timeout here ends the tunnel.
                let wrote = tokio::select! {
                    _ = stop.wait_for(|stopped| *stopped) => None,
                    wrote = tokio::time::timeout(idle, mover.write(&mut to, n)) => Some(wrote),
                };
                match wrote {
                    Some(Ok(Ok(()))) => copied += n as u64,
                    _ => clean = false,
                }
            }
        }
    }
    if clean {
        // Half-close: pass the end of stream on and let the other direction finish.
        let _ = to.shutdown().await;
    } else {
        abort.send_replace(true);
    }
    copied
}
