//! `Reader`: a read half plus the bytes already read past the current message (the rest of a
//! pipelined request, the start of a body, bytes sent after a `CONNECT` head).

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

/// A buffered reader that lets the proxy look at a head before deciding what the bytes after it
/// are. `buf[start..end]` holds bytes read from the socket and not consumed yet.
pub(super) struct Reader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub(super) fn new(inner: R, capacity: usize) -> Reader<R> {
        Reader {
            inner,
            buf: vec![0; capacity.max(1024)],
            start: 0,
            end: 0,
        }
    }

    /// The buffered, unconsumed bytes.
    pub(super) fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Marks `n` buffered bytes as consumed.
    pub(super) fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads more bytes after the buffered ones, without letting the buffered part grow past
    /// `limit`. Returns how many arrived (0 = end of stream).
    pub(super) async fn fill(&mut self, limit: usize) -> io::Result<usize> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let room = limit.min(self.buf.len()).saturating_sub(self.end);
        if room == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "buffer limit reached",
            ));
        }
        let n = self
            .inner
            .read(&mut self.buf[self.end..self.end + room])
            .await?;
        self.end += n;
        Ok(n)
    }

    /// Reads at least one byte into the buffer when it is empty; returns the buffered bytes
    /// (empty at end of stream).
    pub(super) async fn fill_some(&mut self) -> io::Result<&[u8]> {
        if self.start == self.end {
            let limit = self.buf.len();
            self.fill(limit).await?;
        }
        Ok(self.buffered())
    }

    /// Takes everything buffered and leaves the reader empty, returning the inner reader too
    /// (for tunnels: the buffered bytes go upstream first).
    pub(super) fn into_parts(self) -> (R, Vec<u8>) {
        let rest = self.buf[self.start..self.end].to_vec();
        (self.inner, rest)
    }

    /// The reader itself (for `splice`, once the buffer is empty).
    pub(super) fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The underlying buffer's capacity.
    pub(super) fn capacity(&self) -> usize {
        self.buf.len()
    }
}
