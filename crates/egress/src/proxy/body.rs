//! Message bodies: copied by their framing, chunked bodies decoded and re-encoded (so chunk
//! extensions and trailers — two smuggling vectors — never cross the proxy), each read bounded
//! by the idle timeout.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::head::Framing;
use super::reader::Reader;
use super::splice::Pipe;

/// How the proxy writes a body it reads with some [`Framing`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Encode {
    /// The payload bytes as they are (the receiver knows the length, or reads until close).
    Plain,
    /// `Transfer-Encoding: chunked`, one chunk per decoded chunk.
    Chunked,
}

/// Longest chunk-size or trailer line accepted.
const MAX_LINE: usize = 4096;
/// Most trailer bytes skipped after the last chunk.
const MAX_TRAILERS: usize = 16 * 1024;

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// Bodies at least this long are spliced (below it a pipe's three system calls cost more than
/// the copy they save).
const SPLICE_FROM: u64 = 256 * 1024;

/// Copies one body from `from` to `to`; returns the payload bytes copied. `buffer` sizes the
/// splice pipe for long plain bodies.
pub(super) async fn forward(
    from: &mut Reader<OwnedReadHalf>,
    to: &mut OwnedWriteHalf,
    framing: Framing,
    encode: Encode,
    idle: Duration,
    buffer: usize,
) -> io::Result<u64> {
    let pipe = || match (encode, framing) {
        (Encode::Plain, Framing::Length(n)) if n >= SPLICE_FROM => Pipe::new(buffer).ok(),
        (Encode::Plain, Framing::UntilClose) => Pipe::new(buffer).ok(),
        _ => None,
    };
    let copied = match framing {
        Framing::Empty => 0,
        Framing::Length(n) => copy(from, to, Some(n), encode, idle, pipe()).await?,
        Framing::UntilClose => copy(from, to, None, encode, idle, pipe()).await?,
        Framing::Chunked => dechunk(from, to, encode, idle).await?,
    };
    if encode == Encode::Chunked && framing != Framing::Empty {
        to.write_all(b"0\r\n\r\n").await?;
    }
    to.flush().await?;
    Ok(copied)
}

/// Buffered bytes, reading more when there are none; an error at end of stream.
async fn more<R: AsyncRead + Unpin>(from: &mut Reader<R>, idle: Duration) -> io::Result<&[u8]> {
    tokio::time::timeout(idle, from.fill_some())
        .await
        .map_err(|_| timed_out())?
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "no data within the idle timeout")
}

/// Copies `length` bytes (or everything until end of stream when `None`): the bytes already
/// buffered first, then — with a pipe — straight from socket to socket.
async fn copy(
    from: &mut Reader<OwnedReadHalf>,
    to: &mut OwnedWriteHalf,
    length: Option<u64>,
    encode: Encode,
    idle: Duration,
    mut pipe: Option<Pipe>,
) -> io::Result<u64> {
    let mut copied = 0u64;
    loop {
        let remaining = match length {
            Some(n) if copied >= n => return Ok(copied),
            Some(n) => n - copied,
            None => u64::MAX,
        };
        if let (Some(pipe), true) = (pipe.as_mut(), from.buffered().is_empty()) {
            let socket = from.get_ref().as_ref();
            let n = tokio::time::timeout(idle, pipe.fill(socket, remaining))
                .await
                .map_err(|_| timed_out())??;
            if n == 0 {
                return match length {
                    None => Ok(copied),
                    Some(_) => Err(io::ErrorKind::UnexpectedEof.into()),
                };
            }
            // A timeout while bytes sit in the pipe loses them: it fails the whole exchange.
            tokio::time::timeout(idle, pipe.drain(to.as_ref(), n))
                .await
                .map_err(|_| timed_out())??;
            copied += n as u64;
            continue;
        }
        let buffered = more(from, idle).await?;
        if buffered.is_empty() {
            return match length {
                None => Ok(copied),
                Some(_) => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the body ended early",
                )),
            };
        }
        let take = usize::try_from(remaining).map_or(buffered.len(), |r| r.min(buffered.len()));
        if encode == Encode::Chunked {
            to.write_all(format!("{take:x}\r\n").as_bytes()).await?;
            to.write_all(&buffered[..take]).await?;
            to.write_all(b"\r\n").await?;
        } else {
            to.write_all(&buffered[..take]).await?;
        }
        from.consume(take);
        copied += take as u64;
    }
}

/// Reads one CRLF-terminated line (without the CRLF). A bare LF is refused: parsers that accept
/// it disagree with those that do not about where a chunk ends.
async fn line<R: AsyncRead + Unpin>(from: &mut Reader<R>, idle: Duration) -> io::Result<Vec<u8>> {
    loop {
        if let Some(at) = from.buffered().iter().position(|&b| b == b'\n') {
            let buffered = from.buffered();
            if at == 0 || buffered[at - 1] != b'\r' {
                return Err(invalid("a chunked body line does not end with CRLF"));
            }
            let text = buffered[..at - 1].to_vec();
            from.consume(at + 1);
            return Ok(text);
        }
        if from.buffered().len() > MAX_LINE {
            return Err(invalid("a chunked body line is too long"));
        }
        let limit = from.capacity();
        let n = tokio::time::timeout(idle, from.fill(limit))
            .await
            .map_err(|_| {
                io::Error::new(io::ErrorKind::TimedOut, "no data within the idle timeout")
            })??;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the chunked body ended early",
            ));
        }
    }
}

/// `chunk-size [ ";" chunk-ext ]`: 1 to 15 hex digits, nothing else before the extension.
fn chunk_size(line: &[u8]) -> io::Result<u64> {
    let digits = line.split(|&b| b == b';').next().unwrap_or_default();
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(invalid("a chunk size is not a hexadecimal number"));
    }
    let text = std::str::from_utf8(digits).map_err(|_| invalid("a chunk size is not ASCII"))?;
    u64::from_str_radix(text, 16).map_err(|_| invalid("a chunk size is out of range"))
}

async fn dechunk(
    from: &mut Reader<OwnedReadHalf>,
    to: &mut OwnedWriteHalf,
    encode: Encode,
    idle: Duration,
) -> io::Result<u64> {
    let mut copied = 0u64;
    loop {
        let size = chunk_size(&line(from, idle).await?)?;
        if size == 0 {
            break;
        }
        copied += copy(from, to, Some(size), encode, idle, None).await?;
        if !line(from, idle).await?.is_empty() {
            return Err(invalid("a chunk is longer than its size"));
        }
    }
    // Trailer fields are dropped (RFC 9110 §6.5.1 lets a proxy discard them); skip to the end.
    let mut skipped = 0usize;
    loop {
        let trailer = line(from, idle).await?;
        if trailer.is_empty() {
            return Ok(copied);
        }
        skipped += trailer.len();
        if skipped > MAX_TRAILERS {
            return Err(invalid("the trailer section is too long"));
        }
    }
}
