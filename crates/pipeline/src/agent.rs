//! `<name>.agent.md`: YAML front matter (`name`, `model`, `tools`, `mcp`, `max_iterations`,
//! `temperature`) between `---` lines, then a Markdown body that is the system prompt.

use std::fmt;
use std::num::NonZeroU32;

use cordon_protocol::StepName;

use crate::decode::{self, closest};
use crate::diagnostic::{FileSink, Position};
use crate::keys;
use crate::yaml;

/// An agent's name: its file is `<name>.agent.md`. Same alphabet as step names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgentName(String);

impl AgentName {
    pub fn parse(text: &str) -> Option<AgentName> {
        // Step names and agent names share an alphabet that is safe in a file name.
        match StepName::parse_written(text) {
            Ok(_) => Some(AgentName(text.to_owned())),
            Err(_) if text == "success" || text == "failure" => Some(AgentName(text.to_owned())),
            Err(_) => None,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `<name>.agent.md`.
    pub fn file_name(&self) -> String {
        format!("{}.agent.md", self.0)
    }
}

impl fmt::Display for AgentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A built-in tool (DESIGN §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tool {
    Bash,
    ReadFile,
    WriteFile,
    EditFile,
    RequestEgress,
}

impl Tool {
    pub const ALL: [Tool; 5] = [
        Tool::Bash,
        Tool::ReadFile,
        Tool::WriteFile,
        Tool::EditFile,
        Tool::RequestEgress,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Tool::Bash => "bash",
            Tool::ReadFile => "read_file",
            Tool::WriteFile => "write_file",
            Tool::EditFile => "edit_file",
            Tool::RequestEgress => "request_egress",
        }
    }

    pub fn parse(text: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

/// A sampling temperature from 0 to 2, in hundredths so it compares exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Temperature(u16);

impl Temperature {
    pub fn from_hundredths(hundredths: u16) -> Option<Temperature> {
        (hundredths <= 200).then_some(Temperature(hundredths))
    }

    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / 100.0
    }

    /// `0`, `0.7`, `1.25`, `2` (at most two decimals).
    pub fn parse(text: &str) -> Option<Temperature> {
        let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole)
            || (!frac.is_empty() && !digits(frac))
            || frac.len() > 2
            || whole.len() > 1
        {
            return None;
        }
        let whole: u16 = whole.parse().ok()?;
        let mut frac_value: u16 = if frac.is_empty() {
            0
        } else {
            frac.parse().ok()?
        };
        if frac.len() == 1 {
            frac_value *= 10;
        }
        Temperature::from_hundredths(whole * 100 + frac_value)
    }
}

impl fmt::Display for Temperature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, frac) = (self.0 / 100, self.0 % 100);
        match frac {
            0 => write!(f, "{whole}"),
            f10 if f10 % 10 == 0 => write!(f, "{whole}.{}", f10 / 10),
            _ => write!(f, "{whole}.{frac:02}"),
        }
    }
}

/// A parsed agent file.
#[derive(Clone, Debug, PartialEq)]
pub struct Agent {
    pub name: AgentName,
    pub model: Option<String>,
    /// Default: every built-in tool.
    pub tools: Vec<Tool>,
    /// `tools:` entries naming MCP tools (`<server>__<tool>`, `<server>__*`): when any is
    /// listed, only the MCP tools they match are offered; none listed offers them all.
    pub mcp_tools: Vec<String>,
    /// MCP servers for every step running this agent.
    pub mcp: Vec<crate::mcp::McpServer>,
    pub max_iterations: Option<NonZeroU32>,
    pub temperature: Option<Temperature>,
    /// The Markdown body: the system prompt.
    pub system_prompt: String,
}

/// Parses an agent file's text; `stem` is the name the pipeline refers to it by.
pub(crate) fn parse(out: &mut FileSink<'_>, text: &str, stem: &AgentName) -> Option<Agent> {
    let Some((front, body)) = split_front_matter(text) else {
        out.error(
            Position::START,
            format!(
                "an agent file starts with a `---` line, YAML front matter such as `name: {stem}`, \
                 and a closing `---` line; add them above the prompt"
            ),
        );
        return None;
    };
    let node = match yaml::parse(front, 1) {
        Ok(node) => node,
        Err(err) => {
            out.error(err.at, err.message);
            return None;
        }
    };
    let fields = decode::fields(out, &node, &keys::AGENT)?;
    let mut ok = true;
    let name = fields
        .get("name")
        .and_then(|n| decode::string(out, n, "name"));
    match (&name, fields.get("name")) {
        (Some(name), Some(node)) if name != stem.as_str() => {
            out.error(
                node.at,
                format!(
                    "the front matter says `name: {name}` but the file is `{}`; make them equal",
                    stem.file_name()
                ),
            );
            ok = false;
        }
        (None, _) => ok = false,
        _ => {}
    }
    let model = match fields.get("model") {
        Some(n) => {
            let m = decode::string(out, n, "model");
            ok &= m.is_some();
            m
        }
        None => None,
    };
    let mut mcp_tools = Vec::new();
    let tools = match fields.get("tools") {
        None => Tool::ALL.to_vec(),
        Some(n) => {
            let mut tools = Vec::new();
            for (at, text) in
                decode::strings(out, n, "tools", "bash, read_file").unwrap_or_default()
            {
                if let Some((server, tool)) = text.split_once("__") {
                    let tool_ok = tool == "*"
                        || (!tool.is_empty()
                            && tool
                                .bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
                    if !crate::mcp::valid_name(server) || !tool_ok {
                        out.error(
                            at,
                            format!(
                                "{} in `tools` is not an MCP tool pattern; write \
                                 `<server>__<tool>` or `<server>__*`",
                                decode::quoted(&text)
                            ),
                        );
                        ok = false;
                    } else if mcp_tools.contains(&text) {
                        out.error(at, format!("tool `{text}` is listed twice; keep one"));
                        ok = false;
                    } else {
                        mcp_tools.push(text);
                    }
                    continue;
                }
                match Tool::parse(&text) {
                    Some(t) if tools.contains(&t) => {
                        out.error(at, format!("tool `{text}` is listed twice; keep one"));
                        ok = false;
                    }
                    Some(t) => tools.push(t),
                    None => {
                        let names = Tool::ALL.iter().map(|t| t.as_str());
                        let hint = match closest(&text, names) {
                            Some(best) => format!("did you mean `{best}`?"),
                            None => format!(
                                "the built-in tools are {}",
                                Tool::ALL
                                    .iter()
                                    .map(|t| format!("`{}`", t.as_str()))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        };
                        out.error(at, format!("unknown tool `{text}` in `tools`; {hint}"));
                        ok = false;
                    }
                }
            }
            tools
        }
    };
    let max_iterations = match fields.get("max_iterations") {
        Some(n) => {
            let v = decode::positive(out, n, "max_iterations", 40)
                .and_then(|v| NonZeroU32::try_from(v).ok());
            ok &= v.is_some();
            v
        }
        None => None,
    };
    let temperature = match fields.get("temperature") {
        Some(n) => {
            let t = n
                .scalar()
                .filter(|s| s.plain)
                .and_then(|s| Temperature::parse(&s.text));
            if t.is_none() {
                out.error(
                    n.at,
                    format!("`temperature` must be a number from 0 to 2 with at most two decimals, like `temperature: 0.2`; found {}", n.describe()),
                );
                ok = false;
            }
            t
        }
        None => None,
    };
    let mcp = match fields.get("mcp") {
        Some(n) => {
            let servers = crate::mcp::decode(out, n);
            ok &= servers.is_some();
            servers.unwrap_or_default()
        }
        None => Vec::new(),
    };
    let system_prompt = body.trim_start_matches(['\r', '\n']).to_owned();
    if system_prompt.trim().is_empty() {
        out.warning(Position::START, "the agent file has no prompt below its front matter; write the agent's instructions there");
    }
    ok.then(|| Agent {
        name: stem.clone(),
        model,
        tools,
        mcp_tools,
        mcp,
        max_iterations,
        temperature,
        system_prompt,
    })
}

/// Splits `---\n<front>\n---\n<body>`; the front matter must start on the first line.
fn split_front_matter(text: &str) -> Option<(&str, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&rest[..offset], &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temperatures_range_from_zero_to_two() {
        for (text, expected) in [
            ("0", Some("0")),
            ("0.7", Some("0.7")),
            ("1.25", Some("1.25")),
            ("2", Some("2")),
            ("2.01", None),
            ("3", None),
            ("-1", None),
            ("0.125", None),
            (".5", None),
        ] {
            assert_eq!(
                Temperature::parse(text).map(|t| t.to_string()).as_deref(),
                expected,
                "{text:?}"
            );
        }
    }

    #[test]
    fn front_matter_is_split_from_the_body() {
        assert_eq!(
            split_front_matter("---\nname: a\n---\nbody\n"),
            Some(("name: a\n", "body\n"))
        );
        assert_eq!(split_front_matter("---\n---\n"), Some(("", "")));
        assert_eq!(split_front_matter("name: a\n"), None);
        assert_eq!(split_front_matter("---\nname: a\n"), None);
    }
}
