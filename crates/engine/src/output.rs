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

/// One step attempt's stored output against `isolation.output_limit`: past the limit, output is
/// counted, not stored (DESIGN §10), so a step printing without end costs the host a bounded
/// amount of disk.
#[derive(Debug)]
pub(crate) struct OutputBudget {
    limit: u64,
    stored: u64,
    omitted: u64,
}

impl OutputBudget {
    pub(crate) fn new(limit: u64) -> OutputBudget {
        OutputBudget {
            limit,
            stored: 0,
            omitted: 0,
        }
    }

    /// Whether `len` more bytes may be stored; when not, they are counted as omitted.
    pub(crate) fn take(&mut self, len: usize) -> bool {
        let len = len as u64;
        if self.omitted == 0 && self.stored.saturating_add(len) <= self.limit {
            self.stored += len;
            true
        } else {
            self.omitted = self.omitted.saturating_add(len);
            false
        }
    }

    /// How many bytes were not stored.
    pub(crate) fn omitted(&self) -> u64 {
        self.omitted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_past_the_limit_is_counted_not_stored() {
        let mut budget = OutputBudget::new(10);
        assert!(budget.take(6));
        assert!(budget.take(4));
        assert!(!budget.take(1));
        // Once cut, nothing more is stored, even what would still fit.
        assert!(!budget.take(0));
        assert!(!budget.take(5));
        assert_eq!(budget.omitted(), 6);
    }

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
