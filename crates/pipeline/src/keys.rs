//! The accepted keys of every YAML mapping, with their shapes and docs. One table drives both
//! unknown-key detection (with "did you mean") and the generated JSON Schema.

/// A mapping's keys.
pub(crate) struct Table {
    /// The schema definition name.
    pub(crate) name: &'static str,
    /// How messages refer to the mapping: "the pipeline", "a step".
    pub(crate) what: &'static str,
    pub(crate) doc: &'static str,
    pub(crate) keys: &'static [Key],
    pub(crate) required: &'static [&'static str],
}

pub(crate) struct Key {
    pub(crate) name: &'static str,
    pub(crate) shape: Shape,
    pub(crate) doc: &'static str,
}

/// The JSON shape of a value.
pub(crate) enum Shape {
    String,
    /// A step, agent or secret name: `[a-z0-9][a-z0-9_-]{0,62}`.
    Name,
    /// An environment variable name.
    EnvName,
    /// A whole number greater than 0.
    Positive,
    /// A whole number, 0 or more.
    Count,
    /// An agent name or an object of this table (an outcome phase).
    Phase(&'static Table),
    /// A list of commands or objects of this table (an outcome's `verify`).
    Commands(&'static Table),
    Bool,
    /// A number greater than 0 (CPUs) or in a range (temperature).
    Number {
        minimum: f64,
        maximum: Option<f64>,
    },
    /// `2G`, `512M` or a number of bytes.
    Size,
    /// `90s`, `30m`, `2h` or a number of seconds, greater than 0.
    Duration,
    Enum(&'static [&'static str]),
    StringList,
    /// A list of values from a fixed set.
    EnumList(&'static [&'static str]),
    /// An agent's `tools`: built-in names, or MCP tool patterns `<server>__<tool>` /
    /// `<server>__*`.
    ToolList(&'static [&'static str]),
    /// A mapping of names to strings.
    StringMap,
    /// A mapping of names to strings or `{secret: REF}`.
    SecretMap,
    Object(&'static Table),
    /// A mapping of names to objects.
    MapOf(&'static Table),
    List(&'static Table),
    /// `none`, `open` or an allowlist object.
    Network,
    /// A step name, `success`, `failure` or `{goto, retry}`.
    Route,
    /// A shell string or an argv list.
    Command,
}

impl Table {
    pub(crate) fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.keys.iter().map(|k| k.name)
    }
}

pub(crate) const PIPELINE: Table = Table {
    name: "Pipeline",
    what: "the pipeline",
    doc: "A cordon pipeline: agent steps do the work, command steps verify it, host actions finish it.",
    required: &["name"],
    keys: &[
        Key {
            name: "name",
            shape: Shape::String,
            doc: "The pipeline's name (one line); `{name}` in a commit message.",
        },
        Key {
            name: "llm",
            shape: Shape::Object(&LLM),
            doc: "The model provider; required when any step is an agent.",
        },
        Key {
            name: "agents_dir",
            shape: Shape::String,
            doc: "Directory of `<name>.agent.md` files, relative to this file. Default `agents`.",
        },
        Key {
            name: "context_files",
            shape: Shape::StringList,
            doc: "Files given to every agent step, relative to this file.",
        },
        Key {
            name: "max_attempts",
            shape: Shape::Positive,
            doc: "The run's attempt budget; each `retry: true` route uses one. Default 3.",
        },
        Key {
            name: "budget",
            shape: Shape::Object(&BUDGET),
            doc: "Limits for the whole run: tokens, cost and wall clock.",
        },
        Key {
            name: "isolation",
            shape: Shape::Object(&ISOLATION),
            doc: "Sandbox caps and paths for every step.",
        },
        Key {
            name: "network",
            shape: Shape::Network,
            doc: "The default network of every step. Default `none`.",
        },
        Key {
            name: "secrets",
            shape: Shape::MapOf(&SECRET),
            doc: "Secret references steps may use, by name.",
        },
        Key {
            name: "steps",
            shape: Shape::List(&STEP),
            doc: "The steps, in order; an omitted `on_pass` goes to the next one. A pipeline has `steps` or `outcome`.",
        },
        Key {
            name: "report",
            shape: Shape::Object(&REPORT),
            doc: "Comment on a forge issue as the run goes: at its start, after each step when asked, and a summary at its end. Runs on the host with a token that never enters a sandbox.",
        },
        Key {
            name: "outcome",
            shape: Shape::Object(&OUTCOME),
            doc: "Instead of `steps`: carry an outcome (`cordon do \"OUTCOME\"`) through a task graph, each task planned, executed, scrutinized, verified and validated.",
        },
    ],
};

pub(crate) const OUTCOME: Table = Table {
    name: "Outcome",
    what: "`outcome`",
    doc: "An outcome run: the agents of its five phases, the commands every task must pass, and its bounds.",
    required: &["decompose", "plan", "execute", "scrutinize", "validate"],
    keys: &[
        Key {
            name: "decompose",
            shape: Shape::Phase(&PHASE),
            doc: "Turns the outcome into a task graph with the `submit_tasks` tool.",
        },
        Key {
            name: "plan",
            shape: Shape::Phase(&PHASE),
            doc: "Plans one task with the `submit_plan` tool (steps, verify commands, egress requests).",
        },
        Key {
            name: "execute",
            shape: Shape::Phase(&PHASE),
            doc: "Carries out the plan in a read-write workspace.",
        },
        Key {
            name: "scrutinize",
            shape: Shape::Phase(&PHASE),
            doc: "Reviews the task's diff in a fresh conversation on a read-only workspace; its findings go to validate.",
        },
        Key {
            name: "validate",
            shape: Shape::Phase(&PHASE),
            doc: "Decides with a last `VERDICT:` line: `ACCEPT`, `REVISE` (execute again) or `REPLAN` (plan again).",
        },
        Key {
            name: "verify",
            shape: Shape::Commands(&VERIFY),
            doc: "Commands every task must pass (exit 0), before the task's and the plan's own.",
        },
        Key {
            name: "max_tasks",
            shape: Shape::Positive,
            doc: "The most tasks a graph may have. Default 20.",
        },
        Key {
            name: "max_revisions",
            shape: Shape::Count,
            doc: "Returns to `execute` a task may make (from verify or validate) before it fails. Default 2.",
        },
        Key {
            name: "max_replans",
            shape: Shape::Count,
            doc: "Returns to `plan` a task may make before it fails. Default 1.",
        },
        Key {
            name: "parallel",
            shape: Shape::Positive,
            doc: "Tasks at once, each in a linked git worktree of its own, merged back by cordon (a conflict is a revision). Default 1: one at a time in the work tree.",
        },
        Key {
            name: "commit",
            shape: Shape::Enum(OUTCOME_COMMIT),
            doc: "`per_task` (a commit per accepted task, default), `end` (one when the run succeeds) or `none`.",
        },
        Key {
            name: "deliver",
            shape: Shape::Object(&ACTION_PARAMS),
            doc: "Once every task is done and committed: push the run's commits and find or open the pull request, with `deliver`'s parameters (`remote`, `token`, `branch`, `base`, `pull_request`).",
        },
    ],
};

const OUTCOME_COMMIT: &[&str] = &["per_task", "end", "none"];

pub(crate) const PHASE: Table = Table {
    name: "Phase",
    what: "a phase",
    doc: "A phase's agent (`<agents_dir>/<agent>.agent.md`) and its agent-step settings; a plain name means `{agent: NAME}`.",
    required: &["agent"],
    keys: &[
        Key {
            name: "agent",
            shape: Shape::Name,
            doc: "Run the agent defined in `<agents_dir>/<agent>.agent.md`.",
        },
        Key {
            name: "prompt",
            shape: Shape::String,
            doc: "Appended to the task message cordon writes for the phase.",
        },
        Key {
            name: "model",
            shape: Shape::String,
            doc: "Overrides the agent file's and `llm`'s model for this phase.",
        },
        Key {
            name: "max_iterations",
            shape: Shape::Positive,
            doc: "Model-call budget of each attempt of the phase. Default: the agent file's, else 40.",
        },
        Key {
            name: "mcp",
            shape: Shape::List(&MCP),
            doc: "MCP tool servers for the phase's agent, beside its agent file's.",
        },
        Key {
            name: "timeout",
            shape: Shape::Positive,
            doc: "Wall-clock limit of each attempt, in seconds.",
        },
        Key {
            name: "image",
            shape: Shape::String,
            doc: "The environment image the phase runs on; default: `isolation.image`.",
        },
        Key {
            name: "network",
            shape: Shape::Network,
            doc: "The phase's network; default: the pipeline's. `grants: true` on `execute` applies the plan's granted egress requests.",
        },
        Key {
            name: "secrets",
            shape: Shape::StringList,
            doc: "Secret references (declared under top-level `secrets`) set in the phase's sandbox.",
        },
        Key {
            name: "env",
            shape: Shape::StringMap,
            doc: "Extra environment variables in the phase's sandbox.",
        },
    ],
};

pub(crate) const VERIFY: Table = Table {
    name: "Verify",
    what: "a verify command",
    doc: "A command every task must pass; a string or list means `{command: …}`.",
    required: &["command"],
    keys: &[
        Key {
            name: "command",
            shape: Shape::Command,
            doc: "A string runs under `/bin/sh -c`; a list runs without a shell. Exit 0 passes.",
        },
        Key {
            name: "setup",
            shape: Shape::Command,
            doc: "Runs once per run (cached) in its own session before the command.",
        },
        Key {
            name: "setup_network",
            shape: Shape::Network,
            doc: "The setup hook's network. Default `none`.",
        },
        Key {
            name: "network",
            shape: Shape::Network,
            doc: "The command's network; default: the pipeline's.",
        },
        Key {
            name: "timeout",
            shape: Shape::Positive,
            doc: "Wall-clock limit in seconds.",
        },
        Key {
            name: "image",
            shape: Shape::String,
            doc: "The environment image the command runs on; default: `isolation.image`.",
        },
        Key {
            name: "env",
            shape: Shape::StringMap,
            doc: "Extra environment variables in the command's sandbox.",
        },
    ],
};

pub(crate) const LLM: Table = Table {
    name: "Llm",
    what: "`llm`",
    doc: "The model provider agent steps talk to.",
    required: &["provider"],
    keys: &[
        Key {
            name: "provider",
            shape: Shape::Enum(&["openai", "anthropic", "replay"]),
            doc: "`openai` (chat completions; any compatible server), `anthropic` or `replay`.",
        },
        Key {
            name: "model",
            shape: Shape::String,
            doc: "The model name; required for openai and anthropic.",
        },
        Key {
            name: "base_url",
            shape: Shape::String,
            doc: "The provider's API base URL (http or https).",
        },
        Key {
            name: "api_key_env",
            shape: Shape::EnvName,
            doc: "The NAME of the host variable holding the API key; required for anthropic.",
        },
        Key {
            name: "transcript",
            shape: Shape::String,
            doc: "The replay provider's JSON Lines transcript, relative to this file.",
        },
        Key {
            name: "pricing",
            shape: Shape::Object(&PRICING),
            doc: "What the model costs, in US dollars per million tokens; makes cordon compute cost.",
        },
    ],
};

pub(crate) const PRICING: Table = Table {
    name: "Pricing",
    what: "`llm.pricing`",
    doc: "US dollars per million tokens.",
    required: &["input", "output"],
    keys: &[
        Key {
            name: "input",
            shape: Shape::Number {
                minimum: 0.0,
                maximum: None,
            },
            doc: "Per million input tokens (cached input included), like `3`.",
        },
        Key {
            name: "output",
            shape: Shape::Number {
                minimum: 0.0,
                maximum: None,
            },
            doc: "Per million output tokens, like `15`.",
        },
    ],
};

pub(crate) const BUDGET: Table = Table {
    name: "Budget",
    what: "`budget`",
    doc: "Limits for the whole run; when one is reached no further model call is made and the run stops, resumable with a higher limit (`--budget-tokens`, `--budget-cost`, `--budget-wall-clock`).",
    required: &[],
    keys: &[
        Key {
            name: "tokens",
            shape: Shape::Positive,
            doc: "Input + output tokens of every model call in the run.",
        },
        Key {
            name: "cost_usd",
            shape: Shape::Number {
                minimum: 0.000001,
                maximum: None,
            },
            doc: "US dollars at `llm.pricing` (which it needs).",
        },
        Key {
            name: "wall_clock",
            shape: Shape::Duration,
            doc: "Time a cordon process held the run, like `90s`, `30m` or `2h`; not restarted by a resume.",
        },
    ],
};

pub(crate) const ISOLATION: Table = Table {
    name: "Isolation",
    what: "`isolation`",
    doc: "Pipeline-level sandbox settings. Caps apply only when given.",
    required: &[],
    keys: &[
        Key {
            name: "memory",
            shape: Shape::Size,
            doc: "Memory cap (swap included), like `2G`.",
        },
        Key {
            name: "pids",
            shape: Shape::Positive,
            doc: "Process count cap.",
        },
        Key {
            name: "cpus",
            shape: Shape::Number {
                minimum: 0.001,
                maximum: None,
            },
            doc: "CPU cap, like `2` or `0.5`.",
        },
        Key {
            name: "tmp_size",
            shape: Shape::Size,
            doc: "Size of the sandbox's `/tmp` and `/dev/shm` tmpfs, like `512M`.",
        },
        Key {
            name: "output_limit",
            shape: Shape::Size,
            doc: "Output one step attempt stores, like `16M` (the default); past it, output is counted, not stored.",
        },
        Key {
            name: "read_only",
            shape: Shape::StringList,
            doc: "Extra host paths (absolute or `~/…`) exposed read-only at their host path.",
        },
        Key {
            name: "hide",
            shape: Shape::StringList,
            doc: "Workspace-relative paths masked inside the sandbox.",
        },
        Key {
            name: "allow_git_mutations",
            shape: Shape::Bool,
            doc: "Make the git directory writable (except config, hooks, …). Default false.",
        },
        Key {
            name: "toolchains",
            shape: Shape::StringList,
            doc: "Host toolchains exposed read-only with their `bin` on `PATH`: rust, python, node, go.",
        },
        Key {
            name: "caches",
            shape: Shape::EnumList(&crate::CACHES),
            doc: "Persistent download caches for this pipeline's runs: cargo, pip, npm, go, uv.",
        },
        Key {
            name: "cache_limit",
            shape: Shape::Size,
            doc: "The most one cache may hold (`4G` by default); one over it is emptied when a run opens it.",
        },
        Key {
            name: "image",
            shape: Shape::String,
            doc: "The environment image every sandboxed step runs on: a name or `sha256:` digest from `cordon image ls`, as the sandbox's read-only `/`.",
        },
        Key {
            name: "image_writable",
            shape: Shape::Bool,
            doc: "Give each session on an image a throwaway writable layer over it (discarded when the session ends). Default false.",
        },
    ],
};

pub(crate) const SECRET: Table = Table {
    name: "Secret",
    what: "a secret",
    doc: "Where a secret's value comes from.",
    required: &["from", "key"],
    keys: &[
        Key {
            name: "from",
            shape: Shape::Enum(&["env"]),
            doc: "`env`: a host environment variable.",
        },
        Key {
            name: "key",
            shape: Shape::EnvName,
            doc: "The variable's name; steps listing the secret get it under this name.",
        },
    ],
};

pub(crate) const STEP: Table = Table {
    name: "Step",
    what: "a step",
    doc: "One step: exactly one of `agent`, `command` or `action`.",
    required: &["name"],
    keys: &[
        Key {
            name: "name",
            shape: Shape::Name,
            doc: "Unique step name matching `[a-z0-9][a-z0-9_-]{0,62}`; not `success` or `failure`.",
        },
        Key {
            name: "agent",
            shape: Shape::Name,
            doc: "Run the agent defined in `<agents_dir>/<agent>.agent.md`.",
        },
        Key {
            name: "command",
            shape: Shape::Command,
            doc: "A string runs under `/bin/sh -c`; a list runs without a shell. Exit 0 passes.",
        },
        Key {
            name: "action",
            shape: Shape::Enum(&["commit", "deliver"]),
            doc: "A host action: `commit`, or `deliver` (push the run's commits, open the pull request).",
        },
        Key {
            name: "params",
            shape: Shape::Object(&ACTION_PARAMS),
            doc: "Action arguments (`commit`: `message`; `deliver`: `remote`, `branch`, `base`, `token`, `pull_request`).",
        },
        Key {
            name: "prompt",
            shape: Shape::String,
            doc: "Appended to the agent's task message.",
        },
        Key {
            name: "model",
            shape: Shape::String,
            doc: "Overrides the agent file's and `llm`'s model for this agent step.",
        },
        Key {
            name: "produces",
            shape: Shape::StringList,
            doc: "Workspace files that must exist after the step.",
        },
        Key {
            name: "artifact",
            shape: Shape::String,
            doc: "The workspace file whose last `VERDICT:` line decides an agent step.",
        },
        Key {
            name: "mcp",
            shape: Shape::List(&MCP),
            doc: "MCP tool servers for this agent step, beside its agent file's.",
        },
        Key {
            name: "verdicts",
            shape: Shape::Object(&VERDICTS),
            doc: "Verdict keywords; without it an agent passes when it finishes.",
        },
        Key {
            name: "max_iterations",
            shape: Shape::Positive,
            doc: "Model-call budget of an agent step. Default: the agent file's, else 40.",
        },
        Key {
            name: "timeout",
            shape: Shape::Positive,
            doc: "Wall-clock limit in seconds.",
        },
        Key {
            name: "image",
            shape: Shape::String,
            doc: "The environment image this step runs on (a name or digest from `cordon image ls`); default: `isolation.image`.",
        },
        Key {
            name: "env",
            shape: Shape::StringMap,
            doc: "Extra environment variables in the step's sandbox.",
        },
        Key {
            name: "secrets",
            shape: Shape::StringList,
            doc: "Secret references (declared under top-level `secrets`) set in this step's sandbox.",
        },
        Key {
            name: "setup",
            shape: Shape::Command,
            doc: "Runs once per run (cached) in its own session before the step.",
        },
        Key {
            name: "setup_network",
            shape: Shape::Network,
            doc: "The setup hook's network. Default `none`.",
        },
        Key {
            name: "network",
            shape: Shape::Network,
            doc: "This step's network; default: the pipeline's.",
        },
        Key {
            name: "model_lane",
            shape: Shape::Bool,
            doc: "Give a command step the model lane on 127.0.0.1:3129.",
        },
        Key {
            name: "on_pass",
            shape: Shape::Route,
            doc: "Where a pass goes. Default: the next step, or `success` after the last.",
        },
        Key {
            name: "on_fail",
            shape: Shape::Route,
            doc: "Where a fail goes. Default: `failure`.",
        },
        Key {
            name: "on_unverifiable",
            shape: Shape::Route,
            doc: "Agent steps with `verdicts.unverifiable`: where that verdict goes. Default: the `on_fail` route.",
        },
    ],
};

pub(crate) const NETWORK: Table = Table {
    name: "Allowlist",
    what: "`network`",
    doc: "Reach exactly the allowed destinations through the session's proxy.",
    required: &[],
    keys: &[
        Key {
            name: "allow",
            shape: Shape::StringList,
            doc: "Patterns: `example.com`, `*.example.com`, `:PORT` or `:*`, `ip:ADDR[/LEN]:PORT`.",
        },
        Key {
            name: "deny",
            shape: Shape::StringList,
            doc: "Patterns that win over `allow`; without a port they cover every port.",
        },
        Key {
            name: "grants",
            shape: Shape::Bool,
            doc: "The step gets the run's plan-declared grants. Default false.",
        },
    ],
};

pub(crate) const GOTO: Table = Table {
    name: "Goto",
    what: "a route",
    doc: "Go to a step, optionally as a retry (which uses one attempt).",
    required: &["goto"],
    keys: &[
        Key {
            name: "goto",
            shape: Shape::String,
            doc: "A step name, `success` or `failure`.",
        },
        Key {
            name: "retry",
            shape: Shape::Bool,
            doc: "Start a new attempt. Default false.",
        },
    ],
};

pub(crate) const VERDICTS: Table = Table {
    name: "Verdicts",
    what: "`verdicts`",
    doc: "Keywords of the `VERDICT: <keyword>` line that decides an agent step.",
    required: &["pass", "fail"],
    keys: &[
        Key {
            name: "pass",
            shape: Shape::String,
            doc: "The keyword that passes the step.",
        },
        Key {
            name: "fail",
            shape: Shape::String,
            doc: "The keyword that fails the step.",
        },
        Key {
            name: "unverifiable",
            shape: Shape::String,
            doc: "The keyword that says the change cannot be verified; routed by `on_unverifiable`.",
        },
    ],
};

pub(crate) const ACTION_PARAMS: Table = Table {
    name: "ActionParams",
    what: "`params`",
    doc: "Arguments of a host action: `commit` takes `message`; `deliver` takes the rest.",
    required: &[],
    keys: &[
        Key {
            name: "message",
            shape: Shape::String,
            doc: "`commit`: the commit message; `{name}` is the pipeline name and `{run_id}` the run id.",
        },
        Key {
            name: "remote",
            shape: Shape::String,
            doc: "`deliver`: a remote of the workspace's repository by name, or an `https://` URL (`http://` only for destinations in the operator's `[delivery] allow_insecure`).",
        },
        Key {
            name: "branch",
            shape: Shape::String,
            doc: "`deliver`: the branch pushed to; `{name}` and `{run_id}` are filled in. Default `cordon/{run_id}`.",
        },
        Key {
            name: "base",
            shape: Shape::String,
            doc: "`deliver`: the branch the pull request targets. Default `main`.",
        },
        Key {
            name: "token",
            shape: Shape::Name,
            doc: "`deliver`: the secret (declared under `secrets`) the push and the forge API authenticate with; host-side only.",
        },
        Key {
            name: "pull_request",
            shape: Shape::Object(&PULL_REQUEST),
            doc: "`deliver`: find or open a pull request for the branch through the forge's API.",
        },
    ],
};

const FORGES: &[&str] = &["github", "gitea", "gitlab"];

pub(crate) const PULL_REQUEST: Table = Table {
    name: "PullRequest",
    what: "`pull_request`",
    doc: "The pull request `deliver` finds or opens.",
    required: &["forge", "api_url", "repo"],
    keys: &[
        Key {
            name: "forge",
            shape: Shape::Enum(FORGES),
            doc: "`github`, `gitea` (Forgejo too) or `gitlab`.",
        },
        Key {
            name: "api_url",
            shape: Shape::String,
            doc: "The forge API's root: `https://api.example.com` (GitHub), `https://forge.example.com/api/v1` (Gitea), `https://forge.example.com/api/v4` (GitLab).",
        },
        Key {
            name: "repo",
            shape: Shape::String,
            doc: "`OWNER/NAME` (GitLab: the project's path).",
        },
        Key {
            name: "title",
            shape: Shape::String,
            doc: "The title; `{name}`, `{run_id}`, `{branch}`, `{base}` and `{sha}` are filled in. Default `cordon: {name} ({run_id})`.",
        },
        Key {
            name: "body",
            shape: Shape::String,
            doc: "The description, with the same placeholders as `title`.",
        },
        Key {
            name: "draft",
            shape: Shape::Bool,
            doc: "Open it as a draft. Default `false`.",
        },
    ],
};

pub(crate) const REPORT: Table = Table {
    name: "Report",
    what: "`report`",
    doc: "The issue the run reports on and when.",
    required: &["forge", "api_url", "repo", "token"],
    keys: &[
        Key {
            name: "forge",
            shape: Shape::Enum(FORGES),
            doc: "`github`, `gitea` (Forgejo too) or `gitlab`.",
        },
        Key {
            name: "api_url",
            shape: Shape::String,
            doc: "The forge API's root, as for `pull_request`.",
        },
        Key {
            name: "repo",
            shape: Shape::String,
            doc: "`OWNER/NAME` (GitLab: the project's path).",
        },
        Key {
            name: "issue",
            shape: Shape::Positive,
            doc: "The number of an existing issue to comment on. One of `issue` and `create`.",
        },
        Key {
            name: "create",
            shape: Shape::Bool,
            doc: "`true`: open an issue for the run (found again on resume).",
        },
        Key {
            name: "token",
            shape: Shape::Name,
            doc: "The secret (declared under `secrets`) the forge API authenticates with; host-side only.",
        },
        Key {
            name: "on",
            shape: Shape::EnumList(&["start", "step", "end"]),
            doc: "When to comment: `start`, `step` (after each step), `end` (the summary). Default `[start, end]`.",
        },
    ],
};

pub(crate) const MCP: Table = Table {
    name: "McpServer",
    what: "an MCP server",
    doc: "An MCP tool server: `command` (started inside the step's sandbox) or `url` (a streamable-HTTP server reached through the step's egress proxy). Its tools are offered as `<name>__<tool>`.",
    required: &["name"],
    keys: &[
        Key {
            name: "name",
            shape: Shape::String,
            doc: "`[A-Za-z0-9_-]{1,32}` without `__`; the prefix of its tools' names.",
        },
        Key {
            name: "command",
            shape: Shape::StringList,
            doc: "The program and its arguments, run inside the step's sandbox session (no shell).",
        },
        Key {
            name: "env",
            shape: Shape::SecretMap,
            doc: "Variables added to the server's environment: strings or `{secret: REF}`.",
        },
        Key {
            name: "url",
            shape: Shape::String,
            doc: "A streamable-HTTP server's URL (`https://` or `http://`); dialled by the step's proxy under its `network`.",
        },
        Key {
            name: "headers",
            shape: Shape::SecretMap,
            doc: "Headers sent to an HTTP server: strings or `{secret: REF}`.",
        },
    ],
};

pub(crate) const MCP_SECRET: Table = Table {
    name: "McpSecret",
    what: "a secret value",
    doc: "A declared secret's value.",
    required: &["secret"],
    keys: &[Key {
        name: "secret",
        shape: Shape::Name,
        doc: "A reference declared under `secrets:`.",
    }],
};

pub(crate) const AGENT: Table = Table {
    name: "AgentFrontMatter",
    what: "the agent file's front matter",
    doc: "The YAML front matter of a `<name>.agent.md` file.",
    required: &["name"],
    keys: &[
        Key {
            name: "name",
            shape: Shape::Name,
            doc: "Must equal the file name without `.agent.md`.",
        },
        Key {
            name: "model",
            shape: Shape::String,
            doc: "Overrides `llm.model`.",
        },
        Key {
            name: "tools",
            shape: Shape::ToolList(&[
                "bash",
                "read_file",
                "write_file",
                "edit_file",
                "request_egress",
            ]),
            doc: "Built-in tools the agent may call (`bash`, `read_file`, `write_file`, `edit_file`, `request_egress`), and MCP tools by `<server>__<tool>` or `<server>__*`. Default: every built-in; MCP tools are all offered unless one is listed.",
        },
        Key {
            name: "mcp",
            shape: Shape::List(&MCP),
            doc: "MCP tool servers for every step running this agent.",
        },
        Key {
            name: "max_iterations",
            shape: Shape::Positive,
            doc: "Model-call budget. Default 40.",
        },
        Key {
            name: "temperature",
            shape: Shape::Number {
                minimum: 0.0,
                maximum: Some(2.0),
            },
            doc: "Sampling temperature, 0 to 2.",
        },
    ],
};
