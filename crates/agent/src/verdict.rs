//! Verdicts (DESIGN §3): an agent step with `verdicts` passes or fails on the last line of its
//! artifact (or of its final message) whose trimmed text is `VERDICT: <keyword>`.

use cordon_pipeline::Verdicts;

/// What a verdict line decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    Pass,
    /// Failed, with the explanation that becomes the attempt's reason.
    Fail(String),
}

/// Judges `text` (the artifact, or the final message) against the step's keywords. `origin`
/// names where the text came from in the explanation (`` `review.md` ``, `the final message`).
pub fn judge(verdicts: &Verdicts, text: &str, origin: &str) -> Judgement {
    let expected = format!(
        "`VERDICT: {}` or `VERDICT: {}`",
        verdicts.pass, verdicts.fail
    );
    let Some(keyword) = last_keyword(text) else {
        return Judgement::Fail(format!(
            "{origin} has no verdict line; its last such line must be {expected}"
        ));
    };
    if keyword == verdicts.pass {
        Judgement::Pass
    } else if keyword == verdicts.fail {
        Judgement::Fail(format!("{origin} says `VERDICT: {keyword}`"))
    } else {
        Judgement::Fail(format!(
            "{origin} ends with `VERDICT: {keyword}`, an unknown verdict; it must be {expected}"
        ))
    }
}

/// The keyword of the last verdict line of `text`, if any.
pub fn last_keyword(text: &str) -> Option<&str> {
    text.lines().rev().find_map(verdict_keyword)
}

/// The keyword of a verdict line: `VERDICT:`, at least one space, the keyword.
fn verdict_keyword(line: &str) -> Option<&str> {
    let rest = line.trim().strip_prefix("VERDICT:")?;
    let keyword = rest.trim_start_matches([' ', '\t']);
    (keyword.len() < rest.len() && !keyword.is_empty()).then_some(keyword)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Result<(), &str>) {
        let verdicts = Verdicts {
            pass: "APPROVED".to_owned(),
            fail: "NEEDS CHANGES".to_owned(),
        };
        let got = judge(&verdicts, text, "`review.md`");
        match (&got, expected) {
            (Judgement::Pass, Ok(())) => {}
            (Judgement::Fail(reason), Err(want)) => assert_eq!(reason, want, "{text:?}"),
            _ => panic!("{text:?}: got {got:?}, want {expected:?}"),
        }
    }

    #[test]
    fn the_last_verdict_line_decides() {
        check("Looks good.\nVERDICT: APPROVED\n", Ok(()));
        check("  VERDICT:   APPROVED  \n\nthanks", Ok(()));
        check("VERDICT: NEEDS CHANGES\nVERDICT: APPROVED", Ok(()));
        check(
            "VERDICT: APPROVED\nVERDICT: NEEDS CHANGES",
            Err("`review.md` says `VERDICT: NEEDS CHANGES`"),
        );
        check(
            "VERDICT: approved",
            Err(
                "`review.md` ends with `VERDICT: approved`, an unknown verdict; it must be `VERDICT: APPROVED` or `VERDICT: NEEDS CHANGES`",
            ),
        );
        check(
            "all fine",
            Err(
                "`review.md` has no verdict line; its last such line must be `VERDICT: APPROVED` or `VERDICT: NEEDS CHANGES`",
            ),
        );
        check(
            "VERDICT:APPROVED",
            Err(
                "`review.md` has no verdict line; its last such line must be `VERDICT: APPROVED` or `VERDICT: NEEDS CHANGES`",
            ),
        );
        check(
            "The verdict: VERDICT: APPROVED",
            Err(
                "`review.md` has no verdict line; its last such line must be `VERDICT: APPROVED` or `VERDICT: NEEDS CHANGES`",
            ),
        );
    }
}
