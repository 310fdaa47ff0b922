//! Tool output size: [`OutputBuffer`] collects a command's output with a memory bound (the host
//! side uses it), and [`TruncateLimits`] cuts what the model sees down to a head and a tail with
//! a marker naming how much was left out.

use std::collections::VecDeque;

use crate::tool_host::Stream;

/// Collects output chunks in arrival order, keeping at most `limit` bytes per view (the first
/// half and the last half); what falls in between is counted, not kept.
#[derive(Clone, Debug)]
pub struct OutputBuffer {
    combined: Capped,
    stdout: Capped,
    stderr: Capped,
}

impl OutputBuffer {
    pub fn new(limit: usize) -> OutputBuffer {
        OutputBuffer {
            combined: Capped::new(limit),
            stdout: Capped::new(limit),
            stderr: Capped::new(limit),
        }
    }

    pub fn push(&mut self, stream: Stream, bytes: &[u8]) {
        self.combined.push(bytes);
        match stream {
            Stream::Stdout => self.stdout.push(bytes),
            Stream::Stderr => self.stderr.push(bytes),
        }
    }

    /// `(combined, stdout, stderr)`, each with an omission marker where bytes were dropped.
    pub fn finish(self) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        (
            self.combined.finish(),
            self.stdout.finish(),
            self.stderr.finish(),
        )
    }
}

#[derive(Clone, Debug)]
struct Capped {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped: u64,
    half: usize,
}

impl Capped {
    fn new(limit: usize) -> Capped {
        Capped {
            head: Vec::new(),
            tail: VecDeque::new(),
            dropped: 0,
            half: (limit / 2).max(1),
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        let room = self.half.saturating_sub(self.head.len());
        let take = room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..take]);
        bytes = &bytes[take..];
        self.tail.extend(bytes);
        if self.tail.len() > self.half {
            let excess = self.tail.len() - self.half;
            self.tail.drain(..excess);
            self.dropped += excess as u64;
        }
    }

    fn finish(self) -> Vec<u8> {
        let mut out = self.head;
        if self.dropped > 0 {
            out.extend_from_slice(format!("\n[… {} bytes omitted …]\n", self.dropped).as_bytes());
        }
        out.extend(self.tail);
        out
    }
}

/// How much of a tool's output the model sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TruncateLimits {
    /// Bytes of output passed to the model; more is cut to a head and a tail.
    pub model_bytes: usize,
}

impl Default for TruncateLimits {
    fn default() -> TruncateLimits {
        TruncateLimits {
            model_bytes: 16 * 1024,
        }
    }
}

impl TruncateLimits {
    /// Whether `text` must be cut for the model.
    pub fn exceeded_by(&self, text: &str) -> bool {
        text.len() > self.model_bytes
    }

    /// `text` cut to its first and last `model_bytes / 2` bytes (at character boundaries) with a
    /// marker between them that says how much is left out and where the whole text is.
    pub fn cut(&self, text: &str, whole_at: &str) -> String {
        if !self.exceeded_by(text) {
            return text.to_owned();
        }
        let half = self.model_bytes / 2;
        let mut head_end = half;
        while !text.is_char_boundary(head_end) {
            head_end -= 1;
        }
        let mut tail_start = text.len() - half;
        while !text.is_char_boundary(tail_start) {
            tail_start += 1;
        }
        let omitted = tail_start - head_end;
        format!(
            "{}\n[… output truncated: {omitted} bytes omitted; the full output is kept as {whole_at} …]\n{}",
            &text[..head_end],
            &text[tail_start..]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(limit: usize, text: &str, expected: &str) {
        let got = TruncateLimits { model_bytes: limit }.cut(text, "blob 7");
        assert_eq!(got, expected, "limit {limit} on {text:?}");
    }

    #[test]
    fn long_output_keeps_head_and_tail_around_a_marker() {
        check(10, "short", "short");
        check(10, "0123456789", "0123456789");
        check(
            10,
            "0123456789abcdef",
            "01234\n[… output truncated: 6 bytes omitted; the full output is kept as blob 7 …]\nbcdef",
        );
        // Multi-byte characters are never split.
        check(
            4,
            "ééééé",
            "é\n[… output truncated: 6 bytes omitted; the full output is kept as blob 7 …]\né",
        );
    }

    #[test]
    fn buffer_keeps_both_ends_and_counts_the_middle() {
        let mut buffer = OutputBuffer::new(8);
        buffer.push(Stream::Stdout, b"abcdef");
        buffer.push(Stream::Stderr, b"ghijkl");
        let (combined, stdout, stderr) = buffer.finish();
        assert_eq!(
            String::from_utf8_lossy(&combined),
            "abcd\n[… 4 bytes omitted …]\nijkl"
        );
        assert_eq!(stdout, b"abcdef");
        assert_eq!(stderr, b"ghijkl");
    }
}
