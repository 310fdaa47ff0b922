//! The engine's own tools of an outcome run (DESIGN §13): `submit_tasks` for the decompose
//! phase and `submit_plan` for a task's plan. Each call is validated on the spot and answered
//! with every problem at once, so the model fixes them in the same conversation — no plan is
//! ever parsed out of free text. What is accepted is logged (`tasks.planned`; the plan is the
//! call's own `tool.call` with an `ok` result) so a resumed run reads it back from the log.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use cordon_agent::{
    CustomContext, CustomResult, CustomTools, GrantDecision, JournalError, ToolSpec,
};
use cordon_egress::{Pattern, PatternList};
use cordon_protocol::event::PlannedTask;
use cordon_protocol::{Event, is_task_id};
use serde::Deserialize;

/// The longest title, in bytes.
pub const MAX_TITLE: usize = 200;
/// The longest description, in bytes.
pub const MAX_DESCRIPTION: usize = 8 << 10;
/// The most acceptance criteria, plan steps, verify commands or egress requests per list.
pub const MAX_ITEMS: usize = 32;
/// The longest criterion, plan step or command, in bytes.
pub const MAX_ITEM: usize = 2048;

pub const SUBMIT_TASKS: &str = "submit_tasks";
pub const SUBMIT_PLAN: &str = "submit_plan";

/// A task's accepted plan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    #[serde(default)]
    pub steps: Vec<String>,
    #[serde(default)]
    pub verify: Vec<String>,
    #[serde(default)]
    pub egress: Vec<EgressRequest>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressRequest {
    pub domain: String,
    #[serde(default)]
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TasksArgs {
    tasks: Vec<TaskArgs>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskArgs {
    id: serde_json::Value,
    #[serde(default)]
    title: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    acceptance: Vec<String>,
    #[serde(default)]
    depends_on: Vec<String>,
    #[serde(default)]
    verify: Vec<String>,
}

/// Checks a submitted task graph: every problem, or the tasks as accepted.
pub fn check_tasks(arguments: &str, max_tasks: u32) -> Result<Vec<PlannedTask>, Vec<String>> {
    let args: TasksArgs = decode(arguments, TASKS_EXAMPLE)?;
    let mut problems = Vec::new();
    if args.tasks.is_empty() {
        problems.push("`tasks` is empty; give at least one task".to_owned());
    }
    if args.tasks.len() > max_tasks as usize {
        problems.push(format!(
            "{} tasks were given; this pipeline allows at most {max_tasks} (`max_tasks`): merge some",
            args.tasks.len()
        ));
    }
    let mut ids: BTreeMap<String, usize> = BTreeMap::new();
    for (index, task) in args.tasks.iter().enumerate() {
        let at = format!("tasks[{index}]");
        match task.id.as_str() {
            Some(id) if is_task_id(id) => {
                if ids.insert(id.to_owned(), index).is_some() {
                    problems.push(format!("{at}: the id `{id}` is used twice; ids must be unique"));
                }
            }
            Some(id) => problems.push(format!(
                "{at}: the id {} must match `[a-z0-9][a-z0-9-]{{0,31}}` (like `t1` or `parse-flags`)",
                shown(id)
            )),
            None => problems.push(format!("{at}: `id` must be a string like `t1`")),
        }
        if task.title.trim().is_empty() {
            problems.push(format!(
                "{at}: `title` is empty; give the task a short title"
            ));
        } else if task.title.contains(['\n', '\r']) || task.title.len() > MAX_TITLE {
            problems.push(format!(
                "{at}: `title` must be one line of at most {MAX_TITLE} bytes"
            ));
        }
        if task.description.len() > MAX_DESCRIPTION {
            problems.push(format!(
                "{at}: `description` is longer than {MAX_DESCRIPTION} bytes; shorten it"
            ));
        }
        for (key, list) in [
            ("acceptance", &task.acceptance),
            ("verify", &task.verify),
            ("depends_on", &task.depends_on),
        ] {
            bounded(&mut problems, &at, key, list);
        }
    }
    // Dependencies: known, not the task itself, and no cycle.
    for (index, task) in args.tasks.iter().enumerate() {
        let id = task.id.as_str().unwrap_or_default();
        for dep in &task.depends_on {
            if dep == id {
                problems.push(format!("tasks[{index}]: `{id}` depends on itself"));
            } else if !ids.contains_key(dep) {
                problems.push(format!(
                    "tasks[{index}]: `depends_on` names {}, which is not a task id of this graph",
                    shown(dep)
                ));
            }
        }
    }
    if let Some(cycle) = cycle(&args.tasks) {
        problems.push(format!(
            "the dependencies form a cycle: {}; a task can only depend on tasks that can finish before it",
            cycle.join(" → ")
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(args
        .tasks
        .into_iter()
        .map(|task| PlannedTask {
            id: task.id.as_str().unwrap_or_default().to_owned(),
            title: task.title.trim().to_owned(),
            depends_on: task.depends_on,
            description: task.description,
            acceptance: task.acceptance,
            verify: task.verify,
        })
        .collect())
}

/// Checks a submitted plan's shape (egress requests are decided afterwards).
pub fn check_plan(arguments: &str) -> Result<Plan, Vec<String>> {
    let plan: Plan = decode(arguments, PLAN_EXAMPLE)?;
    let mut problems = Vec::new();
    if plan.steps.iter().all(|s| s.trim().is_empty()) {
        problems.push("`steps` is empty; list what you will do, in order".to_owned());
    }
    bounded(&mut problems, "the plan", "steps", &plan.steps);
    bounded(&mut problems, "the plan", "verify", &plan.verify);
    if plan.egress.len() > MAX_ITEMS {
        problems.push(format!("`egress` lists more than {MAX_ITEMS} requests"));
    }
    for (index, request) in plan.egress.iter().enumerate() {
        if let Err(err) = Pattern::parse(request.domain.trim(), PatternList::Allow) {
            problems.push(format!(
                "egress[{index}]: {} is not a destination pattern: {err}",
                shown(&request.domain)
            ));
        }
        if request.reason.trim().is_empty() || request.reason.len() > MAX_ITEM {
            problems.push(format!(
                "egress[{index}]: `reason` must say why the task needs it (at most {MAX_ITEM} bytes)"
            ));
        }
    }
    if problems.is_empty() {
        Ok(plan)
    } else {
        Err(problems)
    }
}

/// Reads a plan back from its logged `tool.call` arguments (already checked when accepted).
pub fn plan_of(arguments: &serde_json::Value) -> Option<Plan> {
    serde_json::from_value(arguments.clone()).ok()
}

const TASKS_EXAMPLE: &str = r#"{"tasks": [{"id": "t1", "title": "Parse the flag", "description": "…", "acceptance": ["…"], "depends_on": [], "verify": ["make test"]}]}"#;
const PLAN_EXAMPLE: &str = r#"{"steps": ["…"], "verify": ["make test"], "egress": [{"domain": "registry.example.com", "reason": "…"}]}"#;

fn decode<T: serde::de::DeserializeOwned>(
    arguments: &str,
    example: &str,
) -> Result<T, Vec<String>> {
    let raw = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    serde_json::from_str(raw).map_err(|err| {
        vec![format!(
            "the arguments are not the expected JSON object ({err}); send one like {example}"
        )]
    })
}

fn bounded(problems: &mut Vec<String>, at: &str, key: &str, list: &[String]) {
    if list.len() > MAX_ITEMS {
        problems.push(format!("{at}: `{key}` lists more than {MAX_ITEMS} items"));
    }
    for (index, item) in list.iter().enumerate() {
        if item.trim().is_empty() {
            problems.push(format!("{at}: `{key}[{index}]` is empty"));
        } else if item.len() > MAX_ITEM {
            problems.push(format!(
                "{at}: `{key}[{index}]` is longer than {MAX_ITEM} bytes"
            ));
        }
    }
}

/// A dependency cycle among `tasks` (by id, the first repeated at the end), if any.
fn cycle(tasks: &[TaskArgs]) -> Option<Vec<String>> {
    let deps: BTreeMap<&str, Vec<&str>> = tasks
        .iter()
        .filter_map(|t| {
            Some((
                t.id.as_str()?,
                // A task naming itself is reported on its own, not as a cycle.
                t.depends_on
                    .iter()
                    .map(String::as_str)
                    .filter(|dep| Some(*dep) != t.id.as_str())
                    .collect(),
            ))
        })
        .collect();
    // Iterative depth-first search: 0 unvisited, 1 on the path, 2 done.
    let mut mark: BTreeMap<&str, u8> = BTreeMap::new();
    for start in deps.keys() {
        if mark.get(start).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut path: Vec<(&str, usize)> = vec![(start, 0)];
        mark.insert(start, 1);
        while let Some((node, next)) = path.last().copied() {
            let children = deps.get(node).map(Vec::as_slice).unwrap_or_default();
            if let Some(child) = children.get(next) {
                if let Some(last) = path.last_mut() {
                    last.1 += 1;
                }
                match mark.get(child).copied().unwrap_or(0) {
                    0 if deps.contains_key(child) => {
                        mark.insert(child, 1);
                        path.push((child, 0));
                    }
                    1 => {
                        let from = path.iter().position(|(n, _)| n == child).unwrap_or(0);
                        let mut cycle: Vec<String> =
                            path[from..].iter().map(|(n, _)| format!("`{n}`")).collect();
                        cycle.push(format!("`{child}`"));
                        return Some(cycle);
                    }
                    _ => {}
                }
            } else {
                mark.insert(node, 2);
                path.pop();
            }
        }
    }
    None
}

/// A model-given text quoted for a message, bounded and on one line.
fn shown(text: &str) -> String {
    let cut: String = text.chars().take(64).collect();
    let more = if cut.len() < text.len() { "…" } else { "" };
    format!("`{}{more}`", cordon_protocol::text::escape_line(&cut))
}

/// The answer to a refused submission: every problem, and what to do.
fn refusal(tool: &str, problems: &[String]) -> CustomResult {
    let mut output = format!("error: `{tool}` was not accepted:\n");
    for problem in problems {
        let _ = writeln!(output, "- {problem}");
    }
    let _ = write!(
        output,
        "Fix every problem and call `{tool}` again with the whole submission."
    );
    CustomResult {
        ok: false,
        output,
        fatal: false,
    }
}

/// `submit_tasks` for the decompose phase.
pub struct SubmitTasks {
    pub max_tasks: u32,
    /// The last accepted graph of this attempt.
    pub accepted: Option<Vec<PlannedTask>>,
}

impl CustomTools for SubmitTasks {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: SUBMIT_TASKS.to_owned(),
            description: format!(
                "Submit the task graph that carries out the outcome: at most {} tasks, each with \
                 an id (`[a-z0-9][a-z0-9-]{{0,31}}`), a one-line title, a description, \
                 acceptance criteria, the ids it depends on and commands that verify it. cordon \
                 checks the graph at once and answers with every problem; call it again with \
                 the whole graph until it is accepted, then finish.",
                self.max_tasks
            ),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "tasks": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string"},
                                "title": {"type": "string"},
                                "description": {"type": "string"},
                                "acceptance": {"type": "array", "items": {"type": "string"}},
                                "depends_on": {"type": "array", "items": {"type": "string"}},
                                "verify": {"type": "array", "items": {"type": "string"}}
                            },
                            "required": ["id", "title"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["tasks"],
                "additionalProperties": false
            }),
        }]
    }

    fn call(
        &mut self,
        _name: &str,
        arguments: &str,
        cx: CustomContext<'_>,
    ) -> Result<CustomResult, JournalError> {
        match check_tasks(arguments, self.max_tasks) {
            Err(problems) => Ok(refusal(SUBMIT_TASKS, &problems)),
            Ok(tasks) => {
                let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
                let output = format!(
                    "accepted {} task{}: {}. Finish now with a one-line summary.",
                    tasks.len(),
                    if tasks.len() == 1 { "" } else { "s" },
                    ids.join(", ")
                );
                cx.journal.event(Event::TasksPlanned {
                    tasks: tasks.clone(),
                })?;
                self.accepted = Some(tasks);
                Ok(CustomResult {
                    ok: true,
                    output,
                    fatal: false,
                })
            }
        }
    }
}

/// `submit_plan` for a task's plan phase; egress requests are decided against the operator's
/// `[grants]` bounds at once and scoped to the task.
pub struct SubmitPlan {
    pub task: String,
    /// Whether the task's execute phase takes grants (`network: {grants: true}`).
    pub grants: bool,
    pub accepted: Option<Plan>,
}

impl CustomTools for SubmitPlan {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: SUBMIT_PLAN.to_owned(),
            description: "Submit the plan for this task: the steps you will take, commands that \
                          verify the task (run in the sandbox after execution, each must exit 0) \
                          and network destinations the execution needs, each with a reason. \
                          Each egress request is decided at once and the answer says `granted` \
                          or `refused`. cordon answers every problem; call it again with the \
                          whole plan until it is accepted, then finish."
                .to_owned(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "steps": {"type": "array", "items": {"type": "string"}},
                    "verify": {"type": "array", "items": {"type": "string"}},
                    "egress": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "domain": {"type": "string"},
                                "reason": {"type": "string"}
                            },
                            "required": ["domain", "reason"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["steps"],
                "additionalProperties": false
            }),
        }]
    }

    fn call(
        &mut self,
        _name: &str,
        arguments: &str,
        cx: CustomContext<'_>,
    ) -> Result<CustomResult, JournalError> {
        let plan = match check_plan(arguments) {
            Err(problems) => return Ok(refusal(SUBMIT_PLAN, &problems)),
            Ok(plan) => plan,
        };
        let mut output = String::from("plan accepted.");
        let mut seen = BTreeSet::new();
        for request in &plan.egress {
            let Ok(pattern) = Pattern::parse(request.domain.trim(), PatternList::Allow) else {
                continue;
            };
            let domain = pattern.to_string();
            if !seen.insert(domain.clone()) {
                continue;
            }
            let decision = if self.grants {
                cx.grants.request(&pattern, &request.reason)
            } else {
                GrantDecision::Refused(
                    "this task's execute phase takes no grants; the pipeline can give it \
                     `network: {allow: [...], grants: true}`"
                        .to_owned(),
                )
            };
            match decision {
                GrantDecision::Granted => {
                    cx.journal.event(Event::PolicyGrant {
                        domain: domain.clone(),
                        reason: request.reason.clone(),
                        task: Some(self.task.clone()),
                    })?;
                    let _ = write!(output, "\ngranted {domain}");
                }
                GrantDecision::Refused(why) => {
                    cx.journal.event(Event::PolicyRefuse {
                        domain: domain.clone(),
                        reason: why.clone(),
                        task: Some(self.task.clone()),
                    })?;
                    let _ = write!(output, "\nrefused {domain}: {why}");
                }
            }
        }
        if !plan.egress.is_empty() {
            output.push_str(
                "\nGranted destinations are reachable from this task's execute phase; plan \
                 around refused ones.",
            );
        }
        output.push_str("\nFinish now with a one-line summary.");
        self.accepted = Some(plan);
        Ok(CustomResult {
            ok: true,
            output,
            fatal: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tasks(json: serde_json::Value, max: u32) -> Result<Vec<String>, Vec<String>> {
        check_tasks(&json.to_string(), max).map(|t| t.into_iter().map(|t| t.id).collect())
    }

    #[test]
    fn a_task_graph_is_checked_with_every_problem_at_once() {
        use serde_json::json;
        let valid = json!({"tasks": [
            {"id": "t1", "title": "One"},
            {"id": "t2", "title": "Two", "depends_on": ["t1"], "verify": ["make test"]}
        ]});
        assert_eq!(tasks(valid, 20), Ok(vec!["t1".into(), "t2".into()]));
        let cases: &[(serde_json::Value, u32, &[&str])] = &[
            (json!({"tasks": []}), 20, &["`tasks` is empty"]),
            (
                json!("not an object"),
                20,
                &["not the expected JSON object"],
            ),
            (
                json!({"tasks": [{"id": "T 1", "title": ""}, {"id": 7, "title": "x"}]}),
                20,
                &[
                    "tasks[0]: the id `T 1` must match",
                    "tasks[0]: `title` is empty",
                    "tasks[1]: `id` must be a string",
                ],
            ),
            (
                json!({"tasks": [{"id": "a", "title": "x"}, {"id": "a", "title": "y"}]}),
                20,
                &["the id `a` is used twice"],
            ),
            (
                json!({"tasks": [{"id": "a", "title": "x", "depends_on": ["a", "zz"]}]}),
                20,
                &[
                    "`a` depends on itself",
                    "names `zz`, which is not a task id",
                ],
            ),
            (
                json!({"tasks": [
                    {"id": "a", "title": "x", "depends_on": ["c"]},
                    {"id": "b", "title": "y", "depends_on": ["a"]},
                    {"id": "c", "title": "z", "depends_on": ["b"]}
                ]}),
                20,
                &["the dependencies form a cycle: `a` → `c` → `b` → `a`"],
            ),
            (
                json!({"tasks": [{"id": "a", "title": "x"}, {"id": "b", "title": "y"}]}),
                1,
                &["2 tasks were given; this pipeline allows at most 1"],
            ),
            (
                json!({"tasks": [{"id": "a", "title": "two\nlines", "verify": [""]}]}),
                20,
                &["`title` must be one line", "`verify[0]` is empty"],
            ),
        ];
        for (json, max, expected) in cases {
            let problems = tasks(json.clone(), *max).expect_err("refused");
            for want in *expected {
                assert!(
                    problems.iter().any(|p| p.contains(want)),
                    "{json}: {want:?} not in {problems:?}"
                );
            }
            assert_eq!(problems.len(), expected.len(), "{json}: {problems:?}");
        }
    }

    #[test]
    fn a_plan_is_checked_before_its_egress_requests_are_decided() {
        let ok = check_plan(
            r#"{"steps": ["edit"], "verify": ["make test"], "egress": [{"domain": "pkg.example.com", "reason": "deps"}]}"#,
        )
        .expect("valid");
        assert_eq!(ok.egress[0].domain, "pkg.example.com");
        let problems =
            check_plan(r#"{"steps": [], "egress": [{"domain": "http://x y", "reason": ""}]}"#)
                .expect_err("refused");
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(check_plan(r#"{"steps": ["a"], "extra": 1}"#).is_err());
        assert_eq!(
            plan_of(&serde_json::json!({"steps": ["a"]})),
            Some(Plan {
                steps: vec!["a".into()],
                ..Plan::default()
            })
        );
    }
}
