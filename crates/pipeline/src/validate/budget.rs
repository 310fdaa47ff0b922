//! Decoding `budget` and `llm.pricing` (DESIGN §12).

use std::num::NonZeroU64;

use crate::decode;
use crate::diagnostic::FileSink;
use crate::keys;
use crate::yaml::Node;
use crate::{Budget, Pricing};

pub(crate) fn budget(out: &mut FileSink<'_>, node: &Node) -> Option<Budget> {
    let fields = decode::fields(out, node, &keys::BUDGET)?;
    let tokens = fields
        .get("tokens")
        .map(|n| decode::positive(out, n, "tokens", 2_000_000));
    let cost_usd = fields
        .get("cost_usd")
        .map(|n| amount(out, n, "cost_usd", "5", false));
    let wall_clock = fields.get("wall_clock").map(|n| wall_clock(out, n));
    Some(Budget {
        tokens: tokens.map_or(Some(None), |t| t.map(Some))?,
        cost_usd: cost_usd.map_or(Some(None), |c| c.map(Some))?,
        wall_clock: wall_clock.map_or(Some(None), |w| w.map(Some))?,
    })
}

/// `llm.pricing`, looked up in the `llm` mapping (whose keys `llm` itself checked).
pub(crate) fn pricing(out: &mut FileSink<'_>, llm: &Node) -> Option<Option<Pricing>> {
    let crate::yaml::Kind::Map(pairs) = &llm.kind else {
        return Some(None);
    };
    let Some((_, node)) = pairs
        .iter()
        .find(|(k, _)| k.scalar().is_some_and(|s| s.text == "pricing"))
    else {
        return Some(None);
    };
    let fields = decode::fields(out, node, &keys::PRICING)?;
    let input = fields
        .get("input")
        .map(|n| amount(out, n, "input", "3", true));
    let output = fields
        .get("output")
        .map(|n| amount(out, n, "output", "15", true));
    Some(Some(Pricing {
        input: input??,
        output: output??,
    }))
}

fn wall_clock(out: &mut FileSink<'_>, node: &Node) -> Option<NonZeroU64> {
    let parsed = node
        .scalar()
        .filter(|s| s.plain)
        .and_then(|s| parse_duration(&s.text));
    if parsed.is_none() {
        out.error(
            node.at,
            format!(
                "`wall_clock` must be a duration greater than 0 like `90s`, `30m` or `2h` (or \
                 whole seconds); found {}",
                node.describe()
            ),
        );
    }
    parsed
}

/// A decimal amount (US dollars): at least 0 when `zero` is allowed, else greater than 0.
fn amount(
    out: &mut FileSink<'_>,
    node: &Node,
    key: &str,
    example: &str,
    zero: bool,
) -> Option<f64> {
    let parsed = node
        .scalar()
        .filter(|s| s.plain)
        .and_then(|s| parse_amount(&s.text))
        .filter(|v| if zero { *v >= 0.0 } else { *v > 0.0 });
    if parsed.is_none() {
        let bound = if zero { "0 or more" } else { "greater than 0" };
        out.error(
            node.at,
            format!(
                "`{key}` must be a number of US dollars {bound}, like `{key}: {example}`; found {}",
                node.describe()
            ),
        );
    }
    parsed
}

/// `12`, `0.5`, `2.75`: digits with at most one decimal point, nothing else (no sign, exponent,
/// `inf` or `nan`).
pub fn parse_amount(text: &str) -> Option<f64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !digits(whole)
        || !digits(fraction)
        || text.ends_with('.')
        || text.len() > 32
    {
        return None;
    }
    text.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// `90s`, `30m`, `2h` or whole seconds, greater than 0, in seconds.
pub fn parse_duration(text: &str) -> Option<NonZeroU64> {
    let (number, unit) = match text.as_bytes().last()? {
        b's' => (&text[..text.len() - 1], 1),
        b'm' => (&text[..text.len() - 1], 60),
        b'h' => (&text[..text.len() - 1], 3600),
        _ => (text, 1),
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .and_then(NonZeroU64::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_seconds_minutes_or_hours_greater_than_zero() {
        for (text, expected) in [
            ("90s", Some(90)),
            ("30m", Some(1800)),
            ("2h", Some(7200)),
            ("45", Some(45)),
            ("0s", None),
            ("0", None),
            ("", None),
            ("s", None),
            ("1.5h", None),
            ("-1m", None),
            ("10d", None),
            (" 5s", None),
            ("99999999999999999999h", None),
        ] {
            assert_eq!(
                parse_duration(text).map(NonZeroU64::get),
                expected,
                "{text:?}"
            );
        }
    }

    #[test]
    fn amounts_are_plain_decimals() {
        for (text, expected) in [
            ("5", Some(5.0)),
            ("0.25", Some(0.25)),
            ("0", Some(0.0)),
            ("1.", None),
            (".5", None),
            ("-1", None),
            ("1e3", None),
            ("inf", None),
            ("NaN", None),
            ("1.2.3", None),
            ("", None),
        ] {
            assert_eq!(parse_amount(text), expected, "{text:?}");
        }
    }
}
