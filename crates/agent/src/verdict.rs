//! Verdicts (DESIGN §3, §17): an agent step with `verdicts` passes, fails or — with a third
//! keyword — is unverifiable on the last line of its artifact (or of its final message) whose
//! trimmed text is `VERDICT: <keyword>`.

use cordon_pipeline::Verdicts;

/// What a verdict line decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    Pass,
    /// Failed, with the explanation that becomes the attempt's reason.
    Fail(String),
    /// The agent could not verify the change (`verdicts.unverifiable`), with the explanation.
    Unverifiable(String),
}

/// Judges `text` (the artifact, or the final message) against the step's keywords. `origin`
/// names where the text came from in the explanation (`` `review.md` ``, `the final message`).
pub fn judge(verdicts: &Verdicts, text: &str, origin: &str) -> Judgement {
    let expected = expected(verdicts);
    let Some(keyword) = last_keyword(text) else {
        return Judgement::Fail(format!(
            "{origin} has no verdict line; its last such line must be {expected}"
        ));
    };
    if keyword == verdicts.pass {
        Judgement::Pass
    } else if keyword == verdicts.fail {
        Judgement::Fail(format!("{origin} says `VERDICT: {keyword}`"))
    } else if verdicts.unverifiable.as_deref() == Some(keyword) {
        Judgement::Unverifiable(format!("{origin} says `VERDICT: {keyword}`"))
    } else {
        Judgement::Fail(format!(
            "{origin} ends with `VERDICT: {keyword}`, an unknown verdict; it must be {expected}"
        ))
    }
}

/// The verdict lines a step accepts, for messages: `` `VERDICT: A` or `VERDICT: B` `` (or
/// three of them).
pub fn expected(verdicts: &Verdicts) -> String {
    match &verdicts.unverifiable {
        None => format!(
            "`VERDICT: {}` or `VERDICT: {}`",
            verdicts.pass, verdicts.fail
        ),
        Some(third) => format!(
            "`VERDICT: {}`, `VERDICT: {}` or `VERDICT: {third}`",
            verdicts.pass, verdicts.fail
        ),
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
            unverifiable: None,
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

    #[test]
    fn a_third_keyword_is_unverifiable_and_named_in_every_message() {
        let verdicts = Verdicts {
            pass: "PASS".to_owned(),
            fail: "FAIL".to_owned(),
            unverifiable: Some("UNVERIFIABLE".to_owned()),
        };
        assert_eq!(
            judge(
                &verdicts,
                "no tests to run\nVERDICT: UNVERIFIABLE",
                "the final message"
            ),
            Judgement::Unverifiable("the final message says `VERDICT: UNVERIFIABLE`".into())
        );
        assert_eq!(judge(&verdicts, "VERDICT: PASS", "x"), Judgement::Pass);
        assert_eq!(
            judge(&verdicts, "VERDICT: MAYBE", "x"),
            Judgement::Fail(
                "x ends with `VERDICT: MAYBE`, an unknown verdict; it must be `VERDICT: PASS`, \
                 `VERDICT: FAIL` or `VERDICT: UNVERIFIABLE`"
                    .into()
            )
        );
    }
}
