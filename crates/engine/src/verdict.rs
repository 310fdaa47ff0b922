//! Agent verdicts (DESIGN §3): an agent without `verdicts` passes when it finishes; with
//! `verdicts`, the **last** line of the artifact (or of the final message when there is no
//! artifact) whose trimmed text is exactly `VERDICT: <keyword>` decides; none, or an unknown
//! keyword, fails with that explanation.

use cordon_pipeline::Verdicts;
use cordon_protocol::event::Verdict;

/// The verdict of `text` (the artifact or the final message) under `verdicts`, and the reason
/// for a failure. `source` names where the text came from, for the reason.
pub fn decide(verdicts: &Verdicts, text: &str, source: &str) -> (Verdict, Option<String>) {
    let last = text
        .lines()
        .rev()
        .map(str::trim)
        .find_map(|line| line.strip_prefix("VERDICT:"));
    match last.map(str::trim) {
        Some(keyword) if keyword == verdicts.pass => (Verdict::Pass, None),
        Some(keyword) if keyword == verdicts.fail => (
            Verdict::Fail,
            Some(format!("{source} says `VERDICT: {keyword}`")),
        ),
        Some(keyword) => (
            Verdict::Fail,
            Some(format!(
                "{source} ends with the unknown verdict `{keyword}`; the last `VERDICT:` line must be `VERDICT: {}` or `VERDICT: {}`",
                verdicts.pass, verdicts.fail
            )),
        ),
        None => (
            Verdict::Fail,
            Some(format!(
                "{source} has no `VERDICT:` line; end it with `VERDICT: {}` or `VERDICT: {}`",
                verdicts.pass, verdicts.fail
            )),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: (Verdict, Option<&str>)) {
        let verdicts = Verdicts {
            pass: "APPROVED".into(),
            fail: "NEEDS CHANGES".into(),
        };
        let (verdict, reason) = decide(&verdicts, text, "review.md");
        assert_eq!((verdict, reason.as_deref()), expected, "{text:?}");
    }

    #[test]
    fn the_last_verdict_line_decides() {
        check("looks good\nVERDICT: APPROVED\n", (Verdict::Pass, None));
        check(
            "VERDICT: NEEDS CHANGES\nfixed\n  VERDICT: APPROVED  \n",
            (Verdict::Pass, None),
        );
        check(
            "VERDICT: APPROVED\nVERDICT:   NEEDS CHANGES\n",
            (
                Verdict::Fail,
                Some("review.md says `VERDICT: NEEDS CHANGES`"),
            ),
        );
        check(
            "VERDICT: approved\n",
            (
                Verdict::Fail,
                Some(
                    "review.md ends with the unknown verdict `approved`; the last `VERDICT:` line must be `VERDICT: APPROVED` or `VERDICT: NEEDS CHANGES`",
                ),
            ),
        );
        check(
            "verdict: APPROVED\nall fine\n",
            (
                Verdict::Fail,
                Some(
                    "review.md has no `VERDICT:` line; end it with `VERDICT: APPROVED` or `VERDICT: NEEDS CHANGES`",
                ),
            ),
        );
        check(
            "I think VERDICT: APPROVED\n",
            (
                Verdict::Fail,
                Some(
                    "review.md has no `VERDICT:` line; end it with `VERDICT: APPROVED` or `VERDICT: NEEDS CHANGES`",
                ),
            ),
        );
    }
}
