//! `LineBuffer`: turns a stream's raw chunks into whole-line texts, so a secret or a UTF-8
//! character split across two reads is still seen whole (and scrubbed) in one `step.output`.

/// A partial line longer than this is logged without waiting for its newline.
const MAX_PENDING: usize = 64 << 10;

#[derive(Debug, Default)]
pub(crate) struct LineBuffer {
    pending: Vec<u8>,
}

impl LineBuffer {
    /// Adds a chunk; returns the text of every complete line now available (or the whole
    /// pending text when it grew beyond the limit).
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Option<String> {
        self.pending.extend_from_slice(chunk);
        let cut = match self.pending.iter().rposition(|&b| b == b'\n') {
            Some(newline) => newline + 1,
            None if self.pending.len() > MAX_PENDING => self.pending.len(),
            None => return None,
        };
        let rest = self.pending.split_off(cut);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        Some(text)
    }

    /// What is left at the end of the stream.
    pub(crate) fn finish(&mut self) -> Option<String> {
        if self.pending.is_empty() {
            return None;
        }
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_joined_across_chunks() {
        let mut buffer = LineBuffer::default();
        assert_eq!(buffer.push(b"tok"), None);
        assert_eq!(buffer.push(b"en-123\nnext"), Some("token-123\n".to_owned()));
        assert_eq!(buffer.push("é".as_bytes().split_at(1).0), None);
        assert_eq!(
            buffer.push(&["é".as_bytes().split_at(1).1, b"\n"].concat()),
            Some("nexté\n".to_owned())
        );
        assert_eq!(buffer.push(b"tail"), None);
        assert_eq!(buffer.finish(), Some("tail".to_owned()));
        assert_eq!(buffer.finish(), None);
    }
}
