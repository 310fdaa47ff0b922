//! Server-sent events: the framing both providers stream in (`event:` / `data:` lines, a blank
//! line ends an event).

use std::io::BufRead;

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field; empty when the server sent none.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Reads events until `on_event` returns `false` or the stream ends; an event still open at the
/// end of the stream is dispatched too.
pub(crate) fn read<E>(
    mut reader: impl BufRead,
    mut on_event: impl FnMut(SseEvent) -> Result<bool, E>,
    io_error: impl Fn(std::io::Error) -> E,
) -> Result<(), E> {
    let mut current = SseEvent::default();
    let mut has_data = false;
    let mut line = String::new();
    loop {
        line.clear();
        let read = reader.read_line(&mut line).map_err(&io_error)?;
        let text = line.trim_end_matches(['\n', '\r']);
        if read == 0 || text.is_empty() {
            if has_data && !on_event(std::mem::take(&mut current))? {
                return Ok(());
            }
            current = SseEvent::default();
            has_data = false;
            if read == 0 {
                return Ok(());
            }
            continue;
        }
        if text.starts_with(':') {
            continue;
        }
        let (field, value) = match text.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (text, ""),
        };
        match field {
            "event" => current.event = value.to_owned(),
            "data" => {
                if has_data {
                    current.data.push('\n');
                }
                current.data.push_str(value);
                has_data = true;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(stream: &str, expected: &[(&str, &str)]) {
        let mut got = Vec::new();
        read(
            stream.as_bytes(),
            |e| {
                got.push((e.event, e.data));
                Ok::<bool, std::io::Error>(true)
            },
            |e| e,
        )
        .expect("reads");
        let want: Vec<(String, String)> = expected
            .iter()
            .map(|(e, d)| ((*e).to_owned(), (*d).to_owned()))
            .collect();
        assert_eq!(got, want, "{stream:?}");
    }

    #[test]
    fn events_are_framed_by_blank_lines() {
        check("data: a\n\ndata: b\n\n", &[("", "a"), ("", "b")]);
        check("event: ping\ndata: {}\r\n\r\n", &[("ping", "{}")]);
        check(": comment\ndata:x\ndata: y\n\n", &[("", "x\ny")]);
        check(
            "data: last without blank line",
            &[("", "last without blank line")],
        );
        check("event: only\n\n\n", &[]);
    }
}
