//! Text that a step, a model or the workspace produced is data on a terminal (DESIGN §10, §18):
//! before it is printed, `ESC` becomes `\e`, every other C0 and C1 control character `\xNN`, and
//! Unicode bidirectional controls and invisible characters (zero-width, soft hyphen, the line
//! and paragraph separators) `\u{NNNN}`, so no escape sequence, carriage return or
//! reordering mark the sandbox wrote can retitle the window, write the clipboard, erase a line or
//! disguise what is shown. [`escape_text`] keeps newlines and tabs (multi-line output tails);
//! [`escape_line`] escapes newlines too (reasons, verdicts, file names, tool arguments).
//! Backslashes are left as they are: the escaped form is for reading, not for parsing back.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is a bidirectional formatting character (embeddings, overrides, isolates, marks).
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// Whether `c` is invisible or breaks a line without being a newline: Unicode's format
/// characters (general category Cf: soft hyphen, zero-width characters, the word joiner and
/// invisible operators, deprecated format controls, the byte order mark, interlinear
/// annotation, tag characters), the line and paragraph separators, and the characters that
/// render as blanks without being spaces (Hangul fillers, Khmer inherent vowels, the combining
/// grapheme joiner, variation selectors, musical formatting). Shown raw any of them would
/// disguise or hide text in a title or a file name.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{34f}'
            | '\u{600}'..='\u{605}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{890}'..='\u{891}'
            | '\u{8e2}'
            | '\u{115f}'..='\u{1160}'
            | '\u{17b4}'..='\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200d}'
            | '\u{2028}'..='\u{2029}'
            | '\u{2060}'..='\u{2064}'
            | '\u{206a}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{110bd}'
            | '\u{110cd}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e007f}'
            | '\u{e0100}'..='\u{e01ef}'
    )
}

fn needs_escape(c: char, keep_newlines: bool) -> bool {
    match c {
        '\n' => !keep_newlines,
        '\t' => false,
        c if c.is_control() => true,
        c => is_bidi(c) || is_invisible(c),
    }
}

fn escape(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    if !text.chars().any(|c| needs_escape(c, keep_newlines)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !needs_escape(c, keep_newlines) {
            out.push(c);
        } else if c == '\u{1b}' {
            out.push_str("\\e");
        } else if c == '\n' {
            out.push_str("\\n");
        } else if u32::from(c) <= 0x9f {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        } else {
            let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
        }
    }
    Cow::Owned(out)
}

/// `text` safe for a terminal, newlines and tabs kept.
pub fn escape_text(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

/// `text` safe for a terminal on one line: newlines escaped as well.
pub fn escape_line(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// A JSON text safe for a terminal: DEL, C1 controls and bidirectional controls (which JSON
/// writers leave as they are) as `\uNNNN` escapes. Outside strings JSON holds only ASCII, so the
/// result is the same JSON value.
pub fn escape_json(json: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| ('\u{7f}'..='\u{9f}').contains(&c) || is_bidi(c) || is_invisible(c);
    if !json.chars().any(unsafe_char) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 12);
    for c in json.chars() {
        if unsafe_char(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_bidi_characters_are_shown_not_obeyed() {
        for (input, text, line) in [
            ("plain ascii", "plain ascii", "plain ascii"),
            ("tab\tkept", "tab\tkept", "tab\tkept"),
            ("two\nlines", "two\nlines", "two\\nlines"),
            (
                "\u{1b}]0;title\u{7}",
                "\\e]0;title\\x07",
                "\\e]0;title\\x07",
            ),
            (
                "\u{1b}]52;c;ZXZpbA==\u{7}",
                "\\e]52;c;ZXZpbA==\\x07",
                "\\e]52;c;ZXZpbA==\\x07",
            ),
            (
                "\r\u{1b}[2Kpassed",
                "\\x0d\\e[2Kpassed",
                "\\x0d\\e[2Kpassed",
            ),
            ("del\u{7f}", "del\\x7f", "del\\x7f"),
            ("c1\u{9b}31m", "c1\\x9b31m", "c1\\x9b31m"),
            (
                "abc\u{202e}fdp.exe",
                "abc\\u{202e}fdp.exe",
                "abc\\u{202e}fdp.exe",
            ),
            (
                "iso\u{2066}late\u{2069}",
                "iso\\u{2066}late\\u{2069}",
                "iso\\u{2066}late\\u{2069}",
            ),
            ("caf\u{e9} ok", "caf\u{e9} ok", "caf\u{e9} ok"),
            (
                "tag\u{e0041}fill\u{3164}vs\u{fe0f}",
                "tag\\u{e0041}fill\\u{3164}vs\\u{fe0f}",
                "tag\\u{e0041}fill\\u{3164}vs\\u{fe0f}",
            ),
            (
                "zero\u{200b}width\u{2028}sep\u{ad}\u{feff}",
                "zero\\u{200b}width\\u{2028}sep\\u{00ad}\\u{feff}",
                "zero\\u{200b}width\\u{2028}sep\\u{00ad}\\u{feff}",
            ),
            ("back\\slash", "back\\slash", "back\\slash"),
        ] {
            assert_eq!(escape_text(input), text, "{input:?}");
            assert_eq!(escape_line(input), line, "{input:?}");
        }
    }

    #[test]
    fn json_lines_keep_their_value_and_lose_raw_controls() {
        let value = serde_json::json!({"text": "a\u{9b}b\u{202e}c\u{1b}d"});
        let line = serde_json::to_string(&value).unwrap();
        let safe = escape_json(&line);
        assert!(
            safe.chars().all(|c| !c.is_control() && !is_bidi(c)),
            "{safe}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&safe).unwrap(),
            value
        );
    }

    #[test]
    fn clean_text_is_not_copied() {
        assert!(matches!(escape_text("nothing to do"), Cow::Borrowed(_)));
    }
}
