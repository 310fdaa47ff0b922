//! `Console`: the tail of one step attempt's output, as lines, capped so a chatty step cannot
//! grow the page without bound; what was dropped is counted for the "N lines omitted" marker.

use std::collections::VecDeque;

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

/// Lines kept per step (the latest attempt only).
pub const MAX_LINES: usize = 400;
/// Bytes kept of a line that never ends (a progress bar redrawn with `\r`).
const MAX_LINE_BYTES: usize = 8 * 1024;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Console {
    lines: VecDeque<String>,
    partial: String,
    omitted: u64,
}

impl Console {
    /// Appends an output chunk (stdout and stderr interleave as they arrived).
    pub fn push(&mut self, text: &str) {
        let mut rest = text;
        while let Some(end) = rest.find('\n') {
            self.partial.push_str(&rest[..end]);
            let line = std::mem::take(&mut self.partial);
            self.lines.push_back(line);
            if self.lines.len() > MAX_LINES {
                self.lines.pop_front();
                self.omitted += 1;
            }
            rest = &rest[end + 1..];
        }
        self.partial.push_str(rest);
        if self.partial.len() > MAX_LINE_BYTES {
            let mut cut = self.partial.len() - MAX_LINE_BYTES;
            while !self.partial.is_char_boundary(cut) {
                cut += 1;
            }
            self.partial.drain(..cut);
        }
    }

    /// The kept text: whole lines, then the unfinished one.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for line in &self.lines {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(&self.partial);
        out
    }

    /// How many earlier lines were dropped.
    pub fn omitted(&self) -> u64 {
        self.omitted
    }

    /// The last non-empty line, for one-line summaries.
    pub fn last_line(&self) -> Option<&str> {
        std::iter::once(self.partial.as_str())
            .chain(self.lines.iter().rev().map(String::as_str))
            .find(|l| !l.trim().is_empty())
    }
}

impl Serialize for Console {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut out = s.serialize_struct("Console", 2)?;
        out.serialize_field("omitted", &self.omitted)?;
        out.serialize_field("text", &self.text())?;
        out.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(chunks: &[&str], text: &str, omitted: u64) {
        let mut console = Console::default();
        for chunk in chunks {
            console.push(chunk);
        }
        assert_eq!(
            (console.text().as_str(), console.omitted()),
            (text, omitted),
            "{chunks:?}"
        );
    }

    #[test]
    fn console_joins_chunks_and_keeps_the_last_lines() {
        check(&["a\nb", "c\n", "d"], "a\nbc\nd", 0);
        check(&[""], "", 0);
        let many = "x\n".repeat(MAX_LINES + 5);
        check(&[&many], &many[..MAX_LINES * 2], 5);
        let long = "é".repeat(MAX_LINE_BYTES);
        let mut console = Console::default();
        console.push(&long);
        assert!(console.text().len() <= MAX_LINE_BYTES && console.text().starts_with('é'));
    }
}
