//! `CustomTools`: tools the engine answers itself rather than the sandbox — an outcome run's
//! `submit_tasks` and `submit_plan` (DESIGN §13), validated on the spot so the model can fix
//! what is wrong in the same conversation. They are offered after the agent file's tools and
//! logged like every tool (`tool.call`, `tool.result`).

use crate::grants::Grants;
use crate::journal::{Journal, JournalError};
use crate::message::ToolSpec;

/// What a custom tool may use while it runs.
pub struct CustomContext<'a> {
    pub journal: &'a mut dyn Journal,
    pub grants: &'a mut dyn Grants,
}

/// A custom tool's answer for the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomResult {
    pub ok: bool,
    pub output: String,
    /// The attempt cannot go on (an MCP server died): the loop records the result, then ends
    /// the attempt as failed with `output` as its reason.
    pub fatal: bool,
}

/// Tools answered by the engine.
pub trait CustomTools {
    /// The specs to offer, after the agent file's tools.
    fn specs(&self) -> Vec<ToolSpec>;

    /// Answers a call of one of [`CustomTools::specs`]; `arguments` is the raw JSON text the
    /// model sent. An `Err` means the store failed and the step cannot go on.
    fn call(
        &mut self,
        name: &str,
        arguments: &str,
        cx: CustomContext<'_>,
    ) -> Result<CustomResult, JournalError>;

    /// The MCP server a tool of [`CustomTools::specs`] belongs to, for `tool.call{server}`.
    fn server(&self, name: &str) -> Option<String> {
        let _ = name;
        None
    }
}

/// No custom tools (every step of a `steps` run).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCustomTools;

impl CustomTools for NoCustomTools {
    fn specs(&self) -> Vec<ToolSpec> {
        Vec::new()
    }

    fn call(
        &mut self,
        name: &str,
        _arguments: &str,
        _cx: CustomContext<'_>,
    ) -> Result<CustomResult, JournalError> {
        Ok(CustomResult {
            ok: false,
            output: format!("error: there is no tool `{name}`"),
            fatal: false,
        })
    }
}
