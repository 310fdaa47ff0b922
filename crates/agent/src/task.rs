//! The task message (DESIGN §6): the one user message of a fresh conversation — the pipeline
//! name, the step, the context files, the expected outputs, the verdict protocol, the step's
//! `prompt` and every piece of feedback accumulated by earlier attempts.

use std::fmt::Write as _;

/// A context file's path and contents (read by the engine from the run's tooling snapshot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextFile {
    pub path: String,
    pub text: String,
}

/// Everything the task message says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Task {
    pub pipeline: String,
    pub step: String,
    pub attempt: u32,
    /// The workspace path (the same inside the sandbox and on the host).
    pub workspace: String,
    pub context_files: Vec<ContextFile>,
    /// Workspace-relative files the step must leave behind.
    pub produces: Vec<String>,
    /// The file whose verdict line decides the step.
    pub artifact: Option<String>,
    /// The step's `verdicts`, when it has them.
    pub verdicts: Option<cordon_pipeline::Verdicts>,
    pub prompt: Option<String>,
    /// The feedback of every earlier retry, oldest first.
    pub feedback: Vec<String>,
}

impl Task {
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "You are running step `{}` of the cordon pipeline `{}` (attempt {}).",
            self.step, self.pipeline, self.attempt
        );
        let _ = writeln!(
            out,
            "The workspace is `{}`; your tools run inside a sandbox there. Work until the task is \
             done, then answer without calling a tool.",
            self.workspace
        );
        if let Some(prompt) = self.prompt.as_deref().filter(|p| !p.trim().is_empty()) {
            let _ = write!(out, "\n## Task\n\n{}\n", prompt.trim_end());
        }
        if !self.produces.is_empty() || self.artifact.is_some() {
            out.push_str("\n## Expected outputs\n\n");
            for path in &self.produces {
                let _ = writeln!(out, "- `{path}` must exist when you finish.");
            }
            if let Some(artifact) = &self.artifact {
                let _ = writeln!(out, "- Write your report to `{artifact}`.");
            }
        }
        if let Some(verdicts) = &self.verdicts {
            let place = match &self.artifact {
                Some(artifact) => format!("the last line of `{artifact}`"),
                None => "the last line of your final answer".to_owned(),
            };
            let expected = crate::verdict::expected(verdicts);
            let _ = write!(
                out,
                "\n## Verdict\n\nEnd with a verdict: {place} must be exactly {expected}. \
                 Anything else fails the step.\n"
            );
            if let Some(third) = &verdicts.unverifiable {
                let _ = writeln!(
                    out,
                    "Say `VERDICT: {third}` when you cannot verify the change (nothing to run \
                     it against), never to avoid a failure."
                );
            }
        }
        if !self.context_files.is_empty() {
            out.push_str("\n## Context files\n");
            for file in &self.context_files {
                let fence = fence_for(&file.text);
                let _ = write!(
                    out,
                    "\n### {}\n\n{fence}\n{}\n{fence}\n",
                    file.path,
                    file.text.trim_end_matches('\n')
                );
            }
        }
        if !self.feedback.is_empty() {
            out.push_str("\n## Feedback from earlier attempts\n\nEarlier attempts failed; fix what this feedback describes.\n");
            for (n, feedback) in self.feedback.iter().enumerate() {
                let fence = fence_for(feedback);
                let _ = write!(
                    out,
                    "\n### Feedback {}\n\n{fence}\n{}\n{fence}\n",
                    n + 1,
                    feedback.trim_end_matches('\n')
                );
            }
        }
        out
    }
}

/// A backtick fence longer than any run of backticks in `text`.
fn fence_for(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_message_holds_every_part_in_order() {
        let task = Task {
            pipeline: "fix".to_owned(),
            step: "review".to_owned(),
            attempt: 2,
            workspace: "/w".to_owned(),
            context_files: vec![ContextFile {
                path: "README.md".to_owned(),
                text: "# Calc\nuse ```code```\n".to_owned(),
            }],
            produces: vec!["summary.md".to_owned()],
            artifact: Some("review.md".to_owned()),
            verdicts: Some(cordon_pipeline::Verdicts {
                pass: "APPROVED".to_owned(),
                fail: "NEEDS CHANGES".to_owned(),
                unverifiable: None,
            }),
            prompt: Some("Review the diff.".to_owned()),
            feedback: vec!["test failed:\nAssertionError".to_owned()],
        };
        let want = "\
You are running step `review` of the cordon pipeline `fix` (attempt 2).
The workspace is `/w`; your tools run inside a sandbox there. Work until the task is done, then answer without calling a tool.

## Task

Review the diff.

## Expected outputs

- `summary.md` must exist when you finish.
- Write your report to `review.md`.

## Verdict

End with a verdict: the last line of `review.md` must be exactly `VERDICT: APPROVED` or `VERDICT: NEEDS CHANGES`. Anything else fails the step.

## Context files

### README.md

````
# Calc
use ```code```
````

## Feedback from earlier attempts

Earlier attempts failed; fix what this feedback describes.

### Feedback 1

```
test failed:
AssertionError
```
";
        assert_eq!(task.render(), want);
    }

    #[test]
    fn a_third_verdict_is_offered_with_when_to_use_it() {
        let task = Task {
            pipeline: "p".to_owned(),
            step: "check".to_owned(),
            attempt: 1,
            workspace: "/w".to_owned(),
            context_files: Vec::new(),
            produces: Vec::new(),
            artifact: None,
            verdicts: Some(cordon_pipeline::Verdicts {
                pass: "PASS".to_owned(),
                fail: "FAIL".to_owned(),
                unverifiable: Some("UNSURE".to_owned()),
            }),
            prompt: None,
            feedback: Vec::new(),
        };
        let text = task.render();
        assert!(
            text.contains(
                "must be exactly `VERDICT: PASS`, `VERDICT: FAIL` or `VERDICT: UNSURE`. Anything \
                 else fails the step.\nSay `VERDICT: UNSURE` when you cannot verify the change"
            ),
            "{text}"
        );
    }
}
