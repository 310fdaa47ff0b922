//! `cordon ui`: serves every stored run on loopback (the runs list, each run's page, the API and
//! live streams) until stopped, following runs that other processes are writing. Also the
//! in-process page `cordon run` serves for its own run ([`serve_run`]).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use cordon_pipeline::{Pipeline, Route, StepKind};
use cordon_protocol::RunId;
use cordon_store::{Reader, RunRow, StateDir, Store};
use cordon_web::serve::{self, IfBusy};
use cordon_web::{AppState, Edge, Graph, GraphSource, GraphStep, Token};

use crate::state_dir::{StateDirArg, StoreArg};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to listen, a loopback address [default: 127.0.0.1:8321, or the next free port]
    #[arg(long, value_name = "ADDR")]
    addr: Option<String>,
    #[command(flatten)]
    state_dir: StateDirArg,
    #[command(flatten)]
    store: StoreArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let state_dir = match args.state_dir.resolve_with(&args.store) {
        Ok(dir) => dir,
        Err(code) => return Ok(code),
    };
    let (addr, if_busy) = match args.addr.as_deref().map(|a| parse_addr("--addr", a)) {
        None => (serve::DEFAULT_ADDR, IfBusy::TryNext),
        Some(Ok(addr)) => (addr, IfBusy::Fail),
        Some(Err(message)) => {
            eprintln!("cordon: {message}");
            return Ok(ExitCode::from(2));
        }
    };
    // Creates the state directory and database when there are no runs yet, so a run started
    // later in another terminal shows up.
    drop(Store::open(&state_dir)?);
    let listener = serve::listen(addr, if_busy)?;
    let bound = listener
        .local_addr()
        .context("cannot read the UI's listening address")?;
    let token = Token::generate()?;
    let state = AppState::new(&state_dir, token.clone(), bound)?.with_graphs(SnapshotGraphs);
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serve::url(bound, "/", &token))?;
    out.flush()?;
    drop(out);
    serve::serve_forever(listener, state)?;
    Ok(ExitCode::SUCCESS)
}

/// `cordon run --ui ADDR` as a clap value parser.
pub fn loopback_addr(text: &str) -> Result<SocketAddr, String> {
    parse_addr("--ui", text)
}

/// `127.0.0.1:PORT`, `localhost:PORT`, `[::1]:PORT`; anything that is not loopback is refused
/// (the page would otherwise be one token away from everyone on the network).
fn parse_addr(flag: &str, text: &str) -> Result<SocketAddr, String> {
    let addr = match text.strip_prefix("localhost:") {
        Some(port) => port
            .parse::<u16>()
            .map(|p| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), p))
            .ok(),
        None => text.parse::<SocketAddr>().ok(),
    };
    let addr = addr.ok_or_else(|| format!("{flag} `{text}` is not an address like 127.0.0.1:8321; pass a loopback address and port"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "{flag} `{text}` is not a loopback address; the UI serves only 127.0.0.1, localhost or [::1] (reach it from elsewhere through an SSH tunnel)"
        ));
    }
    Ok(addr)
}

/// The page `cordon run` serves for its own run.
pub struct RunUi {
    /// The run page's address with its token; Appendix A's line 2 is `ui <url>` on stderr.
    pub url: String,
    /// The address it listens on (never an egress destination).
    pub addr: SocketAddr,
    server: serve::Background,
}

impl RunUi {
    /// Call when the run has ended, right before exiting: open pages get the final events and
    /// switch to saying "browse it with `cordon ui`" (waits at most two seconds).
    pub fn finish(self) {
        self.server.finish(std::time::Duration::from_secs(2));
    }
}

/// Serves the run's page while the run lasts: binds (the default address, or `addr`) and
/// serves from a background thread. The caller prints `ui {url}` as line 2 on stderr.
pub fn serve_run(
    state_dir: &StateDir,
    run: RunId,
    pipeline: &Pipeline,
    addr: Option<SocketAddr>,
) -> anyhow::Result<RunUi> {
    let (addr, if_busy) = match addr {
        None => (serve::DEFAULT_ADDR, IfBusy::TryNext),
        Some(addr) => (addr, IfBusy::Fail),
    };
    let listener = serve::listen(addr, if_busy)?;
    let bound = listener
        .local_addr()
        .context("cannot read the UI's listening address")?;
    let token = Token::generate()?;
    let state =
        AppState::new(state_dir, token.clone(), bound)?.with_graphs(FixedGraph(graph(pipeline)));
    let server = serve::serve_in_background(listener, state)?;
    Ok(RunUi {
        url: serve::url(bound, &format!("/runs/{run}"), &token),
        addr: bound,
        server,
    })
}

/// The run page's graph: the pipeline's steps in order with their pass and fail routes.
pub fn graph(pipeline: &Pipeline) -> Graph {
    let edge = |route: &Route| match route {
        Route::Goto { step, retry } => Edge {
            to: step.as_str().to_owned(),
            retry: *retry,
        },
        Route::Success => Edge {
            to: "success".to_owned(),
            retry: false,
        },
        Route::Failure => Edge {
            to: "failure".to_owned(),
            retry: false,
        },
    };
    let steps = pipeline
        .steps
        .iter()
        .map(|step| GraphStep {
            name: step.name.clone(),
            kind: Some(
                match step.kind {
                    StepKind::Agent(_) => "agent",
                    StepKind::Command(_) => "command",
                    StepKind::Action(_) => "action",
                }
                .to_owned(),
            ),
            on_pass: Some(edge(&step.on_pass)),
            on_fail: Some(edge(&step.on_fail)),
        })
        .collect();
    Graph {
        steps,
        derived: false,
        pricing: pipeline.pricing.map(|p| cordon_web::Pricing {
            input: p.input,
            output: p.output,
        }),
    }
}

/// The graph of the pipeline `cordon run` is running (other runs get theirs from snapshots).
struct FixedGraph(Graph);

impl GraphSource for FixedGraph {
    fn graph(&self, run: &RunRow, store: &Reader) -> Option<Graph> {
        SnapshotGraphs
            .graph(run, store)
            .or_else(|| Some(self.0.clone()))
    }
}

/// Reads each run's pipeline from its tooling snapshot (the files as they were at run start,
/// JSON `{workspace-relative path: text}`), so the graph is the one the run followed even if
/// the pipeline file changed since.
struct SnapshotGraphs;

impl GraphSource for SnapshotGraphs {
    fn graph(&self, run: &RunRow, store: &Reader) -> Option<Graph> {
        let bytes = store.blob(run.snapshot?).ok()??;
        let files: BTreeMap<String, String> = serde_json::from_slice(&bytes).ok()?;
        let files: BTreeMap<PathBuf, String> = files
            .into_iter()
            .map(|(k, v)| (run.workspace.join(k), v))
            .collect();
        let loaded = cordon_pipeline::load(&run.pipeline_file, &files).ok()?;
        Some(graph(&loaded.pipeline))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Result<&str, &str>) {
        let got = parse_addr("--addr", text).map(|a| a.to_string());
        let expected = expected
            .map(str::to_owned)
            .map_err(|needle| needle.to_owned());
        match (&got, &expected) {
            (Err(message), Err(needle)) => {
                assert!(message.contains(needle.as_str()), "{text}: {message}")
            }
            _ => assert_eq!(got, expected, "{text}"),
        }
    }

    #[test]
    fn ui_addresses_must_be_loopback() {
        check("127.0.0.1:9000", Ok("127.0.0.1:9000"));
        check("localhost:0", Ok("127.0.0.1:0"));
        check("[::1]:8321", Ok("[::1]:8321"));
        check("127.1.2.3:80", Ok("127.1.2.3:80"));
        check("0.0.0.0:8321", Err("is not a loopback address"));
        check("[::]:8321", Err("is not a loopback address"));
        check("192.0.2.1:8321", Err("is not a loopback address"));
        check("example.test:8321", Err("is not an address like"));
        check("127.0.0.1", Err("is not an address like"));
    }
}
