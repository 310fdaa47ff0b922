//! The YAML front end: text → a tree of nodes that each know their line and column.
//!
//! serde stops at the first error, but `cordon validate` reports every problem at once, so the
//! typed model is decoded from this spanned tree by hand (see `decode.rs`). Scalars keep their
//! text and whether they were quoted, so `"600"` and `600` can be told apart.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Span};

use crate::diagnostic::Position;

/// Deeper nesting than this is refused: no pipeline needs it, and it bounds recursion.
const MAX_DEPTH: usize = 64;
/// At most this many nodes, aliases expanded, so an alias bomb cannot exhaust memory.
const MAX_NODES: usize = 1_000_000;

/// One YAML node and where it starts.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Node {
    pub(crate) at: Position,
    pub(crate) kind: Kind,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Kind {
    Scalar(Scalar),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Scalar {
    pub(crate) text: String,
    /// Unquoted plain scalars are the only ones that can be null, booleans or numbers.
    pub(crate) plain: bool,
}

impl Node {
    pub(crate) fn scalar(&self) -> Option<&Scalar> {
        match &self.kind {
            Kind::Scalar(s) => Some(s),
            Kind::Seq(_) | Kind::Map(_) => None,
        }
    }

    pub(crate) fn is_null(&self) -> bool {
        self.scalar().is_some_and(|s| {
            s.plain && matches!(s.text.as_str(), "" | "~" | "null" | "Null" | "NULL")
        })
    }

    /// What this node is, for messages: "a mapping", "a list", "a string `x`", "nothing".
    pub(crate) fn describe(&self) -> String {
        match &self.kind {
            Kind::Map(_) => "a mapping".to_owned(),
            Kind::Seq(_) => "a list".to_owned(),
            Kind::Scalar(_) if self.is_null() => "nothing".to_owned(),
            Kind::Scalar(s) => format!("`{}`", shorten(&s.text)),
        }
    }
}

/// At most 40 characters of `text`, on one line, for quoting in a message.
pub(crate) fn shorten(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    if line.chars().count() > 40 || line.len() != text.len() {
        let mut out: String = line.chars().take(40).collect();
        out.push('…');
        out
    } else {
        line.to_owned()
    }
}

/// A YAML syntax error with the parser's own location.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SyntaxError {
    pub(crate) at: Position,
    pub(crate) message: String,
}

fn position(span: &Span) -> Position {
    Position::new(span.start.line(), span.start.col() + 1)
}

impl From<ScanError> for SyntaxError {
    fn from(err: ScanError) -> SyntaxError {
        SyntaxError {
            at: Position::new(err.marker().line(), err.marker().col() + 1),
            message: format!("invalid YAML: {}", err.info()),
        }
    }
}

/// A container being filled while events stream in.
enum Open {
    Seq {
        at: Position,
        anchor: usize,
        items: Vec<Node>,
    },
    Map {
        at: Position,
        anchor: usize,
        entries: Vec<(Node, Node)>,
        key: Option<Node>,
    },
}

/// Parses one YAML document. An empty document is a null scalar at 1:1. `line_offset` is added
/// to every line (front matter starts on line 2 of an agent file).
pub(crate) fn parse(text: &str, line_offset: usize) -> Result<Node, SyntaxError> {
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Open> = Vec::new();
    let mut anchors: HashMap<usize, Node> = HashMap::new();
    let mut root: Option<Node> = None;
    let mut nodes = 0usize;
    let mut documents = 0usize;
    let shift = |mut p: Position| {
        p.line += line_offset;
        p
    };
    while let Some(next) = parser.next_event() {
        let (event, span) = next?;
        let at = shift(position(&span));
        let finished = match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => None,
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(SyntaxError {
                        at,
                        message: "the file holds more than one YAML document; remove the second \
                                  `---` and everything after it"
                            .to_owned(),
                    });
                }
                None
            }
            Event::Alias(id) => match anchors.get(&id) {
                Some(node) => {
                    nodes += count(node);
                    let mut node = node.clone();
                    node.at = at;
                    Some((node, 0))
                }
                None => {
                    return Err(SyntaxError {
                        at,
                        message: "alias refers to an unknown anchor; define it with `&name` first"
                            .to_owned(),
                    });
                }
            },
            Event::Scalar(text, style, anchor, _tag) => Some((
                Node {
                    at,
                    kind: Kind::Scalar(Scalar {
                        text: text.into_owned(),
                        plain: style == ScalarStyle::Plain,
                    }),
                },
                anchor,
            )),
            Event::SequenceStart(anchor, _tag) => {
                stack.push(Open::Seq {
                    at,
                    anchor,
                    items: Vec::new(),
                });
                None
            }
            Event::MappingStart(anchor, _tag) => {
                stack.push(Open::Map {
                    at,
                    anchor,
                    entries: Vec::new(),
                    key: None,
                });
                None
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Open::Seq { at, anchor, items }) => Some((
                    Node {
                        at,
                        kind: Kind::Seq(items),
                    },
                    anchor,
                )),
                Some(Open::Map {
                    at,
                    anchor,
                    entries,
                    ..
                }) => Some((
                    Node {
                        at,
                        kind: Kind::Map(entries),
                    },
                    anchor,
                )),
                None => None,
            },
        };
        if stack.len() > MAX_DEPTH {
            return Err(SyntaxError {
                at,
                message: format!(
                    "the YAML is nested more than {MAX_DEPTH} levels deep; flatten it"
                ),
            });
        }
        let Some((node, anchor)) = finished else {
            continue;
        };
        nodes += 1;
        if nodes > MAX_NODES {
            return Err(SyntaxError {
                at,
                message: format!(
                    "the YAML expands to more than {MAX_NODES} nodes (aliases included); simplify it"
                ),
            });
        }
        if anchor != 0 {
            anchors.insert(anchor, node.clone());
        }
        match stack.last_mut() {
            Some(Open::Seq { items, .. }) => items.push(node),
            Some(Open::Map { entries, key, .. }) => match key.take() {
                Some(k) => entries.push((k, node)),
                None => *key = Some(node),
            },
            None => root = Some(node),
        }
    }
    Ok(root.unwrap_or(Node {
        at: shift(Position::START),
        kind: Kind::Scalar(Scalar {
            text: String::new(),
            plain: true,
        }),
    }))
}

fn count(node: &Node) -> usize {
    match &node.kind {
        Kind::Scalar(_) => 1,
        Kind::Seq(items) => 1 + items.iter().map(count).sum::<usize>(),
        Kind::Map(entries) => {
            1 + entries
                .iter()
                .map(|(k, v)| count(k) + count(v))
                .sum::<usize>()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outline(node: &Node) -> String {
        let at = format!("{}:{}", node.at.line, node.at.column);
        match &node.kind {
            Kind::Scalar(s) if s.plain => format!("{at}={}", s.text),
            Kind::Scalar(s) => format!("{at}='{}'", s.text),
            Kind::Seq(items) => {
                format!(
                    "{at}[{}]",
                    items.iter().map(outline).collect::<Vec<_>>().join(" ")
                )
            }
            Kind::Map(entries) => format!(
                "{at}{{{}}}",
                entries
                    .iter()
                    .map(|(k, v)| format!("{} {}", outline(k), outline(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    fn check(text: &str, expected: &str) {
        let got = match parse(text, 0) {
            Ok(node) => outline(&node),
            Err(e) => format!("error {}:{} {}", e.at.line, e.at.column, e.message),
        };
        assert_eq!(got, expected, "input {text:?}");
    }

    #[test]
    fn yaml_nodes_carry_line_and_column() {
        check("", "1:1=");
        check(
            "a: 1\nb: [x, 'y']\n",
            "1:1{1:1=a 1:4=1, 2:1=b 2:4[2:5=x 2:8='y']}",
        );
        check(
            "- &n {k: v}\n- *n\n",
            "1:1[1:3{1:7=k 1:10=v} 2:3{1:7=k 1:10=v}]",
        );
        check(
            "a: [1\n",
            "error 2:1 invalid YAML: while parsing a flow sequence, expected ',' or ']'",
        );
        check(
            "a: 1\n---\nb: 2\n",
            "error 2:1 the file holds more than one YAML document; remove the second `---` and everything after it",
        );
        check(
            &"[".repeat(100),
            "error 1:65 the YAML is nested more than 64 levels deep; flatten it",
        );
    }
}
