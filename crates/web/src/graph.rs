//! `Graph`: a pipeline's steps and routes as the run page draws them (pass edges, fail edges,
//! retry back-edges). The web crate does not read pipelines: the caller supplies the graph, or
//! the view derives a partial one from the run's `step.*` and `route` events.

use cordon_protocol::StepName;
use serde::Serialize;

/// Where a verdict leads: a step name, `success` or `failure`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Edge {
    pub to: String,
    /// A `retry: true` route (drawn as a back-edge; the run's attempt counter grows).
    pub retry: bool,
}

/// One node: a step, its kind (`agent`, `command`, `action`) when known, and its two routes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GraphStep {
    pub name: StepName,
    pub kind: Option<String>,
    /// `None` while unknown (a derived graph learns edges as routes are taken).
    pub on_pass: Option<Edge>,
    pub on_fail: Option<Edge>,
}

/// The steps in pipeline order.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Graph {
    pub steps: Vec<GraphStep>,
    /// True when the graph was pieced together from events (steps that never ran are missing).
    pub derived: bool,
    /// The pipeline's `llm.pricing`, when it has one: costs are shown only then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pricing: Option<Pricing>,
}

/// US dollars per million tokens (`llm.pricing`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Pricing {
    pub input: f64,
    pub output: f64,
}

impl Pricing {
    /// What `input` and `output` tokens cost, in US dollars.
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input + output as f64 * self.output) / 1_000_000.0
    }
}

impl Graph {
    /// An empty graph to be filled from events.
    pub fn derived() -> Graph {
        Graph {
            steps: Vec::new(),
            derived: true,
            pricing: None,
        }
    }

    pub(crate) fn position(&self, name: &StepName) -> Option<usize> {
        self.steps.iter().position(|s| &s.name == name)
    }

    /// Adds a step seen in the events to a derived graph (a declared graph is left alone).
    pub(crate) fn learn_step(&mut self, name: &StepName) {
        if self.derived && self.position(name).is_none() {
            self.steps.push(GraphStep {
                name: name.clone(),
                kind: None,
                on_pass: None,
                on_fail: None,
            });
        }
    }

    /// Records a taken route in a derived graph: a pass or fail edge, as the verdict said.
    pub(crate) fn learn_route(&mut self, from: &StepName, passed: bool, edge: Edge) {
        if !self.derived {
            return;
        }
        self.learn_step(from);
        if let Ok(to) = StepName::parse(&edge.to) {
            self.learn_step(&to);
        }
        if let Some(i) = self.position(from) {
            let slot = if passed {
                &mut self.steps[i].on_pass
            } else {
                &mut self.steps[i].on_fail
            };
            *slot = Some(edge);
        }
    }
}
