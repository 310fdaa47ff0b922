//! What a sandboxed command may send to the user's terminal when `cordon exec` writes its output
//! to one (DESIGN §11; threat model, "Terminals"). The text, colours, cursor movement, erasing,
//! scrolling regions, screen modes and titles a full-screen program needs pass; every sequence
//! that makes the terminal *answer* — device status and attribute reports, window reports,
//! mode and setting requests, OSC colour and clipboard queries, every DCS, SOS, PM and APC string,
//! `ENQ` — is dropped, and so are the keyboard-protocol switches that change what keys send. An
//! answer is typed into the terminal's input: after the command has ended it would reach the
//! user's shell, with text the command chose (a colour it set, a title), and one Enter would run
//! it. Dropping the questions is the only defence that cannot lose a race with the terminal.
//!
//! [`Filter`] is a streaming ECMA-48 parser: sequences split across writes are held (bounded) until
//! complete; a sequence longer than its bound is dropped whole.

/// The longest control sequence (CSI, ESC) held while it is incomplete.
const MAX_SEQUENCE: usize = 64;
/// The longest OSC string held; longer ones are dropped.
const MAX_STRING: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Ground,
    /// After `ESC`.
    Escape,
    /// After `ESC` and intermediate bytes (`ESC ( 0`).
    EscapeIntermediate,
    /// After `ESC [`.
    Csi,
    /// Inside an OSC string (after `ESC ]`).
    Osc,
    /// `ESC` inside an OSC string: `\` ends it.
    OscEscape,
    /// Inside a DCS, SOS, PM or APC string: dropped up to its end.
    Drop,
    /// `ESC` inside a dropped string.
    DropEscape,
    /// Inside a UTF-8 sequence: this many continuation bytes still to come (`held` has the
    /// bytes so far). Only complete, valid sequences pass — a raw byte `0x80..=0x9F` is a C1
    /// control to a terminal in an 8-bit locale (`0x9B` is CSI) — and none encoding a C1.
    Utf8(u8),
}

/// Removes what would make the terminal answer; see the module documentation.
#[derive(Clone, Debug)]
pub struct Filter {
    state: State,
    /// The sequence being read (from its `ESC`).
    held: Vec<u8>,
    /// The held sequence grew past its bound: dropped, the rest skipped to its end.
    overflow: bool,
    /// What the command left changed that the farewell undoes only when changed (undoing it
    /// moves the cursor): the alternate screen, origin mode, a scrolling region.
    left: Left,
    /// The terminal reads UTF-8. When it does not (a C or Latin-1 locale), every byte
    /// `0x80..=0x9F` is a C1 control to it — even inside what would be a UTF-8 character
    /// (`ě` is `C4 9B`, and `9B` is CSI) — so bytes pass one by one and those are dropped.
    utf8: bool,
}

/// What a command left on, for [`farewell`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Left {
    pub alternate_screen: bool,
    pub origin_mode: bool,
    pub scroll_region: bool,
}

impl Left {
    /// Either stream's changes (both go to the same terminal).
    pub fn or(self, other: Left) -> Left {
        Left {
            alternate_screen: self.alternate_screen || other.alternate_screen,
            origin_mode: self.origin_mode || other.origin_mode,
            scroll_region: self.scroll_region || other.scroll_region,
        }
    }
}

impl Default for Filter {
    fn default() -> Filter {
        Filter::new()
    }
}

impl Filter {
    /// A filter for a UTF-8 terminal.
    pub fn new() -> Filter {
        Filter::for_terminal(true)
    }

    /// A filter for a terminal that reads UTF-8 (`utf8`) or single bytes.
    pub fn for_terminal(utf8: bool) -> Filter {
        Filter {
            state: State::Ground,
            held: Vec::new(),
            overflow: false,
            left: Left::default(),
            utf8,
        }
    }

    /// Whether the command left the alternate screen on (see [`farewell`]).
    pub fn alternate_screen(&self) -> bool {
        self.left.alternate_screen
    }

    /// What the command left on that the farewell must undo.
    pub fn left(&self) -> Left {
        self.left
    }

    /// Appends to `out` what of `input` may reach the terminal.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &byte in input {
            self.byte(byte, out);
        }
    }

    fn hold(&mut self, byte: u8, bound: usize) {
        if self.held.len() < bound {
            self.held.push(byte);
        } else {
            self.overflow = true;
        }
    }

    fn ground(&mut self) {
        self.state = State::Ground;
        self.held.clear();
        self.overflow = false;
    }

    /// Emits the held sequence (unless it overflowed) and returns to ground.
    fn emit(&mut self, out: &mut Vec<u8>) {
        if !self.overflow {
            out.extend_from_slice(&self.held);
        }
        self.ground();
    }

    fn utf8(&mut self, lead: u8, continuation: u8) {
        self.held.clear();
        self.held.push(lead);
        self.state = State::Utf8(continuation);
    }

    /// Notes the modes an allowed CSI sequence changes that the farewell must know of.
    fn track(&mut self, body: &[u8]) {
        let Some((&last, rest)) = body.split_last() else {
            return;
        };
        if last == b'r' && rest.first() != Some(&b'?') {
            // A scrolling region (`CSI r` alone resets it).
            self.left.scroll_region = !rest.is_empty();
            return;
        }
        let Some(params) = rest.strip_prefix(b"?") else {
            return;
        };
        for param in params.split(|b| *b == b';') {
            if matches!(param, b"47" | b"1047" | b"1049") {
                self.left.alternate_screen = last == b'h';
            }
            if param == b"6" {
                self.left.origin_mode = last == b'h';
            }
        }
    }

    fn byte(&mut self, byte: u8, out: &mut Vec<u8>) {
        // CAN and SUB abort any sequence (and are dropped); ESC starts a new one anywhere but
        // inside a string, where it may begin the terminator.
        match (self.state, byte) {
            (State::Osc | State::Drop, 0x1b) => {}
            (_, 0x18 | 0x1a) => {
                self.ground();
                return;
            }
            (State::OscEscape | State::DropEscape, _) => {}
            (_, 0x1b) => {
                self.ground();
                self.state = State::Escape;
                self.held.push(byte);
                return;
            }
            _ => {}
        }
        match self.state {
            State::Ground => match byte {
                // Text, and the controls that only move the cursor or ring the bell.
                0x07..=0x0d => out.push(byte),
                0x00..=0x1f | 0x7f => {}
                0x20..=0x7e => out.push(byte),
                // A single-byte terminal: printable bytes pass, C1 controls do not.
                0xa0..=0xff if !self.utf8 => out.push(byte),
                0x80..=0x9f if !self.utf8 => {}
                // UTF-8 lead bytes (overlong `0xC0`/`0xC1` and past U+10FFFF dropped).
                0xc2..=0xdf => self.utf8(byte, 1),
                0xe0..=0xef => self.utf8(byte, 2),
                0xf0..=0xf4 => self.utf8(byte, 3),
                // A continuation byte without a lead, or an invalid byte: dropped.
                _ => {}
            },
            State::Utf8(left) => {
                if !(0x80..=0xbf).contains(&byte) {
                    // Cut short: the partial character is dropped, the byte judged afresh.
                    self.ground();
                    self.byte(byte, out);
                    return;
                }
                self.held.push(byte);
                if left > 1 {
                    self.state = State::Utf8(left - 1);
                    return;
                }
                // U+0080..=U+009F (C1 controls) never pass, nor surrogates or overlongs.
                let valid = std::str::from_utf8(&self.held)
                    .ok()
                    .and_then(|s| s.chars().next())
                    .is_some_and(|c| !('\u{80}'..='\u{9f}').contains(&c));
                if valid {
                    out.extend_from_slice(&self.held);
                }
                self.ground();
            }
            State::Escape => match byte {
                b'[' => {
                    self.held.push(byte);
                    self.state = State::Csi;
                }
                b']' => {
                    self.held.push(byte);
                    self.state = State::Osc;
                }
                // DCS, SOS, PM, APC: requests (DECRQSS, XTGETTCAP) and payloads; all dropped.
                b'P' | b'X' | b'^' | b'_' => {
                    self.held.clear();
                    self.state = State::Drop;
                }
                // Character set designations (`ESC ( 0`, line drawing): the only intermediates
                // allowed. `ESC #` (`ESC # 8` fills the screen), `ESC %` (character encoding)
                // and `ESC SP` (`ESC SP G` turns on 8-bit answers) are dropped.
                b'(' | b')' | b'*' | b'+' | b'-' | b'.' | b'/' => {
                    self.held.push(byte);
                    self.state = State::EscapeIntermediate;
                }
                0x20..=0x2f => {
                    self.overflow = true;
                    self.state = State::EscapeIntermediate;
                }
                // Cursor save and restore, index, reverse index, next line, tab set, keypad
                // modes; everything else (`ESC Z` asks for the terminal's identity, `ESC c`
                // resets it, `ESC <` leaves VT52 mode) is dropped.
                // (HTS, `ESC H`, is not among them: tab stops are not put back.)
                b'7' | b'8' | b'D' | b'E' | b'M' | b'=' | b'>' => {
                    self.held.push(byte);
                    self.emit(out);
                }
                _ => self.ground(),
            },
            State::EscapeIntermediate => match byte {
                0x20..=0x2f => self.overflow = true,
                0x30..=0x7e => {
                    self.hold(byte, MAX_SEQUENCE);
                    self.emit(out);
                }
                _ => self.ground(),
            },
            State::Csi => match byte {
                0x20..=0x3f => self.hold(byte, MAX_SEQUENCE),
                0x40..=0x7e => {
                    self.hold(byte, MAX_SEQUENCE);
                    if !self.overflow && csi_allowed(&self.held[2..]) {
                        let body = self.held[2..].to_vec();
                        self.track(&body);
                        self.emit(out);
                    } else {
                        self.ground();
                    }
                }
                // A control inside a CSI: the sequence is malformed; dropped.
                _ => self.ground(),
            },
            State::Osc => match byte {
                0x07 => {
                    if !self.overflow && osc_allowed(&self.held[2..]) {
                        self.held.push(byte);
                        self.emit(out);
                    } else {
                        self.ground();
                    }
                }
                0x1b => self.state = State::OscEscape,
                _ => self.hold(byte, MAX_STRING),
            },
            State::OscEscape => {
                if byte == b'\\' && !self.overflow && osc_allowed(&self.held[2..]) {
                    self.held.extend_from_slice(b"\x1b\\");
                    self.emit(out);
                } else if byte == b'\\' {
                    self.ground();
                } else {
                    // `ESC` not followed by `\` ends the string unfinished (dropped) and starts
                    // a new sequence.
                    self.ground();
                    self.state = State::Escape;
                    self.held.push(0x1b);
                    self.byte(byte, out);
                }
            }
            State::Drop => {
                if byte == 0x1b {
                    self.state = State::DropEscape;
                } else if byte == 0x07 {
                    self.ground();
                }
            }
            State::DropEscape => {
                if byte == b'\\' {
                    self.ground();
                } else {
                    self.state = State::Drop;
                }
            }
        }
    }
}

/// Whether the CSI sequence `body` (after `ESC [`: parameters, intermediates, final byte) is one
/// that changes only what the terminal shows. Allowed by name; everything else dropped — an
/// unknown sequence might be a question.
fn csi_allowed(body: &[u8]) -> bool {
    let Some((&last, rest)) = body.split_last() else {
        return false;
    };
    let prefix = rest.first().copied().filter(|b| matches!(b, b'<'..=b'?'));
    let params = if prefix.is_some() { &rest[1..] } else { rest };
    let intermediates: Vec<u8> = params
        .iter()
        .copied()
        .filter(|b| (0x20..=0x2f).contains(b))
        .collect();
    // Parameters are digits and separators only, before any intermediate.
    let digits = params
        .iter()
        .take_while(|b| !(0x20..=0x2f).contains(*b))
        .all(|b| b.is_ascii_digit() || *b == b';' || *b == b':');
    if !digits {
        return false;
    }
    match (prefix, intermediates.as_slice(), last) {
        // Cursor movement, erasing, inserting, scrolling, tabs, margins, SGR, save/restore.
        (
            None,
            [],
            b'@'
            | b'A'..=b'H'
            | b'I'
            | b'J'
            | b'K'
            | b'L'
            | b'M'
            | b'P'
            | b'S'
            | b'T'
            | b'X'
            | b'Z'
            | b'`'
            | b'a'
            | b'b'
            | b'd'
            | b'e'
            | b'f'
            | b'm'
            | b'r'
            | b's'
            | b'u',
        ) => true,
        // DEC private modes, each allowed by number (none that leaves ANSI mode or switches the
        // emulation; each one the farewell puts back).
        (Some(b'?'), [], b'h' | b'l') => {
            params.split(|b| *b == b';').all(|p| DEC_MODES.contains(&p))
        }
        // Selective erase.
        (Some(b'?'), [], b'J' | b'K') => true,
        // ANSI modes: insert mode only (mode 2 locks the keyboard).
        (None, [], b'h' | b'l') => params.split(|b| *b == b';').all(|p| p == b"4"),
        // Cursor style (DECSCUSR) and soft reset (DECSTR).
        (None, [b' '], b'q') | (None, [b'!'], b'p') => true,
        _ => false,
    }
}

/// The DEC private modes a command may set and reset: cursor keys, reverse video, origin, wrap,
/// cursor blink and visibility, the alternate screen, mouse and focus reports, bracketed paste,
/// synchronized output — each one the farewell puts back.
const DEC_MODES: [&[u8]; 20] = [
    b"1", b"5", b"6", b"7", b"12", b"25", b"47", b"1000", b"1002", b"1003", b"1004", b"1005",
    b"1006", b"1015", b"1016", b"1047", b"1048", b"1049", b"2004", b"2026",
];

/// Whether the OSC string `body` (after `ESC ]`, before its terminator) only sets something the
/// user sees: a window or icon title, a hyperlink, a shell-integration mark — in valid UTF-8
/// without a control character (a terminal may read a C1 control inside it as one).
fn osc_allowed(body: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(body) else {
        return false;
    };
    if text.chars().any(char::is_control) {
        return false;
    }
    let number: Vec<u8> = body
        .iter()
        .copied()
        .take_while(u8::is_ascii_digit)
        .collect();
    let rest = &body[number.len()..];
    let separated = rest.first() == Some(&b';');
    let allowed = matches!(number.as_slice(), b"0" | b"1" | b"2" | b"8" | b"133");
    // A `?` anywhere asks for the current value instead of setting it.
    allowed && separated && !rest.contains(&b'?')
}

/// What `cordon exec` writes to the user's terminal when the command has ended, before input is
/// discarded and the terminal's settings restored: a cancel of any unfinished sequence; every
/// mouse and focus report off; bracketed paste and synchronized output off (the shell turns
/// paste on again); normal cursor keys and keypad; insert, origin and reverse video off, wrap on,
/// the whole screen scrolling (cursor kept); ASCII in G0; the cursor shown; default keyboard
/// protocols and attributes — and the main screen when the command left the alternate one on
/// ([`Filter::alternate_screen`]).
pub fn farewell(left: Left) -> Vec<u8> {
    let mut out = b"\x18\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l\
\x1b[?1016l\x1b[?1004l\x1b[?2004l\x1b[?2026l\x1b[?1l\x1b>\x1b[4l\x1b[?5l\x1b[?7h\x1b(B\x1b[?25h\
\x1b[0 q\x1b[?12l\x1b]8;;\x1b\\\x1b[>4;0m\x1b[=0;1u\x1b[0m"
        .to_vec();
    // Each of these moves the cursor, so only when the command left it changed: origin mode
    // off (cursor home), then the whole screen scrolling again with the cursor kept (`ESC 7`
    // saves origin mode too, so it comes after origin mode is off).
    if left.origin_mode {
        out.extend_from_slice(b"\x1b[?6l");
    }
    if left.scroll_region {
        out.extend_from_slice(b"\x1b7\x1b[r\x1b8");
    }
    if left.alternate_screen {
        out.extend_from_slice(b"\x1b[?1049l");
    }
    out
}

/// The question `cordon exec` asks last (device status, `CSI 5 n`) and the start of its answer
/// (`CSI 0 n`): terminals answer in order, so once it is read every earlier answer has been.
pub const STATUS_QUERY: &[u8] = b"\x1b[5n";
pub const STATUS_ANSWER: &[u8] = b"\x1b[0n";

#[cfg(test)]
mod tests {
    use super::*;

    fn filtered(input: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        Filter::new().push(input, &mut out);
        out
    }

    #[test]
    fn what_only_changes_the_screen_passes() {
        for input in [
            &b"plain text\r\n"[..],
            b"\x1b[1;31mred\x1b[0m",
            b"\x1b[2J\x1b[H\x1b[10;20H",
            b"\x1b[?1049h\x1b[?25l\x1b[?25h\x1b[?1049l",
            b"\x1b[?1000;1006h\x1b[4h\x1b[4l\x1b=\x1b>",
            b"\x1b[2 q",
            b"\x1b(0lqk\x1b(B",
            b"\x1b7\x1b8\x1bM",
            b"\x1b]0;my title\x07",
            b"\x1b]2;title\x1b\\",
            b"\x1b]8;;http://example.com\x1b\\link\x1b]8;;\x1b\\",
            "ünïcødé ✓ 𝄞".as_bytes(),
            b"\tbell\x07",
        ] {
            assert_eq!(
                filtered(input),
                input,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn every_question_to_the_terminal_is_dropped() {
        for (input, kept) in [
            // Device status and cursor position reports.
            (&b"a\x1b[5nb"[..], &b"ab"[..]),
            (b"a\x1b[6nb", b"ab"),
            (b"\x1b[?6n", b""),
            (b"\x1b[?996n", b""),
            // Device attributes, primary, secondary, tertiary; DECID.
            (b"\x1b[c\x1b[0c\x1b[>c\x1b[=c\x1bZ", b""),
            // Window reports (title report: the classic) and window operations.
            (b"\x1b[21t\x1b[14t\x1b[8;1;1t", b""),
            // Mode, setting and checksum requests.
            (b"\x1b[?2004$p\x1b[1$p\x1b[1;1;1;1*y\x1b[x", b""),
            // Version and keyboard protocol queries and switches.
            (
                b"\x1b[>0q\x1b[?u\x1b[>1u\x1b[<u\x1b[=1;1u\x1b[>4;2m\x1b[?4m",
                b"",
            ),
            // OSC colour and clipboard queries and sets, and a title query in disguise.
            (b"\x1b]11;?\x07\x1b]10;?\x1b\\\x1b]4;1;?\x07", b""),
            (b"\x1b]11;rgb:de/ad/be\x07\x1b]52;c;ZWNobw==\x07", b""),
            (b"\x1b]0;?\x07", b""),
            // DCS (DECRQSS, XTGETTCAP), SOS, PM, APC.
            (b"x\x1bP$qm\x1b\\y", b"xy"),
            (
                b"x\x1bP+q544e\x1b\\\x1bX..\x1b\\\x1b^..\x1b\\\x1b_..\x1b\\y",
                b"xy",
            ),
            // ENQ (answerback), and C1 controls written as UTF-8 (U+009B is CSI).
            (b"a\x05b", b"ab"),
            ("a\u{9b}6nb".as_bytes(), b"a6nb"),
            // Raw C1 (an 8-bit terminal reads 0x9B as CSI, 0x90 as DCS, 0x9D as OSC) and
            // invalid UTF-8 (overlong, surrogate, 0xFF, cut short).
            (b"a\x9b6nb\x90$qm\x9c\x9d11;?\x07c", b"a6nb$qm11;?\x07c"),
            (b"a\xc0\xafb\xed\xa0\x80c\xffd\xe2\x82", b"abcd"),
            // Emulation and keyboard switches: VT52, Tektronix, 132 columns, keyboard lock.
            (b"\x1b[?2l\x1b[?38h\x1b[?3h\x1b[2h\x1b[?1;2h", b""),
            // Screen fill, encoding and 8-bit answer switches.
            (b"\x1b#8\x1b%@\x1b G\x1b F", b""),
            // Controls inside an allowed OSC.
            (
                b"\x1b]0;a\x9b6n\x07\x1b]2;a\xc2\x9b6n\x07\x1b]0;a\x05\x07",
                b"",
            ),
            // RIS.
            (b"\x1bc", b""),
        ] {
            assert_eq!(
                filtered(input),
                kept,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn the_farewell_leaves_the_alternate_screen_only_when_the_command_stayed_on_it() {
        let mut filter = Filter::new();
        let mut out = Vec::new();
        assert!(!filter.alternate_screen());
        filter.push(b"\x1b[?1049h", &mut out);
        assert!(filter.alternate_screen());
        filter.push(b"\x1b[?1049l", &mut out);
        assert!(!filter.alternate_screen());
        filter.push(b"\x1b[?25;1049h", &mut out);
        assert!(filter.alternate_screen());
        let on = |alternate_screen| Left {
            alternate_screen,
            ..Left::default()
        };
        assert!(farewell(on(true)).ends_with(b"\x1b[?1049l"));
        assert!(!farewell(on(false)).windows(8).any(|w| w == b"\x1b[?1049l"));
        // Origin mode and a scrolling region the same way, and never `ESC 8` before `?6l`.
        filter.push(b"\x1b[?6h\x1b[3;8r", &mut out);
        let left = filter.left();
        assert!(left.origin_mode && left.scroll_region);
        let bytes = farewell(left);
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.find("\x1b[?6l") < text.find("\x1b7\x1b[r\x1b8"),
            "{text:?}"
        );
        assert!(!String::from_utf8_lossy(&farewell(Left::default())).contains("\x1b[r"));
    }

    #[test]
    fn a_single_byte_terminal_gets_no_c1_control_hidden_in_a_utf8_character() {
        // `ě` is C4 9B: to a terminal that does not read UTF-8, 9B is CSI.
        let mut out = Vec::new();
        Filter::for_terminal(false).push(b"A\xc4\x9b6n\xe9t\xe9 \x9bc", &mut out);
        assert_eq!(out, b"A\xc46n\xe9t\xe9 c");
        // The same bytes to a UTF-8 terminal: the character passes whole.
        let mut out = Vec::new();
        Filter::for_terminal(true).push("Aě".as_bytes(), &mut out);
        assert_eq!(out, "Aě".as_bytes());
    }

    #[test]
    fn tab_stops_cannot_be_cleared_or_set() {
        assert_eq!(filtered(b"a\x1b[3gb\x1b[gc\x1bHd"), b"abcd");
    }

    #[test]
    fn sequences_split_across_writes_are_judged_whole() {
        let mut filter = Filter::new();
        let mut out = Vec::new();
        for piece in [
            &b"a\x1b"[..],
            b"[",
            b"6",
            b"n",
            b"b\x1b[3",
            b"1m",
            b"c\xc2",
            b"\x9b",
            b"d",
        ] {
            filter.push(piece, &mut out);
        }
        assert_eq!(out, b"ab\x1b[31mcd");
    }

    #[test]
    fn an_overlong_or_aborted_sequence_is_dropped_whole() {
        let mut long = b"\x1b[".to_vec();
        long.extend(std::iter::repeat_n(b'1', 200));
        long.extend(b"mafter");
        assert_eq!(filtered(&long), b"after");
        let mut osc = b"\x1b]0;".to_vec();
        osc.extend(std::iter::repeat_n(b'x', 10_000));
        osc.extend(b"\x07after");
        assert_eq!(filtered(&osc), b"after");
        // CAN aborts; an unterminated OSC ends at the next ESC that is not ST.
        assert_eq!(filtered(b"\x1b[6\x18n"), b"n");
        assert_eq!(filtered(b"\x1b]11;?\x1b[31mred"), b"\x1b[31mred");
    }
}
