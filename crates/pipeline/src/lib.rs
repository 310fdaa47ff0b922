//! `pipeline.yaml`, `*.agent.md` and the operator policy file: spanned YAML/TOML → validated
//! model, with every problem reported at once as `file:line:col: message`.
//!
//! The only IO is reading the files it is given (through [`Files`]); nothing here runs, resolves
//! or writes anything.
#![forbid(unsafe_code)]

mod agent;
mod decode;
mod delivery;
pub use delivery::{Deliver, Forge, PullRequest, Remote, Report, ReportIssue, ReportOn};
mod diagnostic;
mod env_name;
mod isolation;
mod keys;
mod llm;
mod load;
pub mod mcp;
mod model;
mod network;
pub mod policy;
mod rel_path;
pub mod schema;
mod secret;
mod size;
mod url;
pub use url::HttpUrl;
mod validate;
pub use validate::{parse_amount, parse_duration};
mod yaml;

pub use agent::{Agent, AgentName, Temperature, Tool};
pub use diagnostic::{Diagnostic, Diagnostics, Position, Severity};
pub use env_name::EnvName;
pub use isolation::{
    CACHES, Cpus, DEFAULT_CACHE_LIMIT, DEFAULT_OUTPUT_LIMIT, HostPath, Isolation, TOOLCHAINS,
};
pub use llm::Llm;
pub use load::{Disk, Files, Loaded, load, load_str};
pub use mcp::{McpServer, McpTransport, McpUrl, McpValue};
pub use model::{
    Action, AgentStep, Budget, CommandSpec, CommandStep, DEFAULT_AGENTS_DIR, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_ITERATIONS, DEFAULT_MAX_REPLANS, DEFAULT_MAX_REVISIONS, DEFAULT_MAX_TASKS,
    OutcomeCommit, OutcomeSpec, Pipeline, Pricing, Route, Sandboxed, Setup, Step, StepKind,
    StepName, Timeout, Verdicts,
};
pub use network::{Allowlist, Network};
pub use rel_path::{RelPath, RelPathError};
pub use secret::{Secret, SecretName};
pub use size::{ByteSize, ByteSizeError};
