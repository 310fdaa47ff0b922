//! `cordon proxy --listen ADDR`: the egress proxy on its own, with the same policy options as a
//! session (`--allow`, `--deny`, `--resolve`, `--allow-private`, `--policy`) and `--audit FILE`.
//! Prints `listening <ADDR>` (the bound address, so `:0` works) and serves until SIGINT/SIGTERM.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use cordon_egress::proxy::{
    AuditSink, Identity, JsonLinesSink, Limits, ListenerHandle, NoAudit, Proxy, ProxyConfig,
    Shutdown,
};
use cordon_egress::{
    Cidr, Mode, Pattern, PatternList, Policy, PolicySpec, StaticResolver, SystemResolver,
};
use cordon_pipeline::policy::OperatorPolicy;

use crate::operator;

/// Exit status for a bad option or policy: nothing was served.
const USAGE_EXIT: u8 = 2;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on, such as `127.0.0.1:3128` (port 0 picks a free port)
    #[arg(long, value_name = "ADDR")]
    listen: String,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Append one JSON line per decision and per tunnel close to FILE (created 0600)
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
}

/// The egress policy options shared by `cordon proxy` and `cordon exec`.
#[derive(Debug, Default, clap::Args)]
pub struct PolicyArgs {
    /// Allow a destination pattern, such as `example.com`, `*.example.com:8443` or
    /// `ip:192.0.2.0/24:443` (repeatable; without any, nothing is allowed)
    #[arg(long = "allow", value_name = "PATTERN")]
    pub allow: Vec<String>,
    /// Deny a destination pattern; deny always wins (repeatable)
    #[arg(long = "deny", value_name = "PATTERN")]
    pub deny: Vec<String>,
    /// Answer HOST with IP instead of asking DNS (repeatable); a private or loopback IP is still
    /// refused unless `--allow-private` covers it
    #[arg(long = "resolve", value_name = "HOST=IP")]
    pub resolve: Vec<String>,
    /// Let allowed names and ip: rules reach this non-public range, such as `10.0.0.0/8`
    /// (repeatable)
    #[arg(long = "allow-private", value_name = "CIDR")]
    pub allow_private: Vec<String>,
    /// Operator policy file [default: $XDG_CONFIG_HOME/cordon/policy.toml or
    /// ~/.config/cordon/policy.toml, if it exists]
    #[arg(long = "policy", value_name = "FILE")]
    pub policy: Option<PathBuf>,
}

/// A policy and the static resolver table built from the options and the operator policy file.
pub struct Built {
    pub spec: PolicySpec,
    pub resolve: StaticResolver,
    /// The operator policy's `[env] pass` names (for `cordon exec`'s sandbox).
    pub env_pass: Vec<cordon_pipeline::EnvName>,
}

impl PolicyArgs {
    /// Parses every option and loads the operator policy file, as [`PolicyArgs::build_in`]
    /// with no workspace (`cordon proxy` serves no workspace).
    pub fn build(&self, mode: Mode) -> Result<Built, String> {
        self.build_in(mode, None)
    }

    /// Parses every option and loads the operator policy file (`--policy`, else the default
    /// file), refusing one inside `workspace`. The error lists every problem, one per line,
    /// each naming the fix.
    pub fn build_in(&self, mode: Mode, workspace: Option<&Path>) -> Result<Built, String> {
        let mut problems = Vec::new();
        let patterns = |texts: &[String], list: PatternList, flag: &str, out: &mut Vec<String>| {
            texts
                .iter()
                .filter_map(|text| {
                    Pattern::parse(text, list)
                        .map_err(|e| out.push(format!("`--{flag} {text}`: {e}")))
                        .ok()
                })
                .collect::<Vec<_>>()
        };
        let allow = patterns(&self.allow, PatternList::Allow, "allow", &mut problems);
        let deny = patterns(&self.deny, PatternList::Deny, "deny", &mut problems);
        let mut allow_private: Vec<Cidr> = self
            .allow_private
            .iter()
            .filter_map(|text| {
                Cidr::parse(text)
                    .map_err(|e| problems.push(format!("`--allow-private {text}`: {e}")))
                    .ok()
            })
            .collect();
        let mut resolve = StaticResolver::new();
        for text in &self.resolve {
            if let Err(e) = resolve.insert_flag(text) {
                problems.push(format!("`--resolve {text}`: {e}"));
            }
        }
        let operator = match operator::load(self.policy.as_deref(), workspace) {
            Ok(operator) => operator.policy,
            Err(problem) => {
                problems.push(problem);
                OperatorPolicy::default()
            }
        };
        if !problems.is_empty() {
            return Err(problems.join("\n"));
        }
        allow_private.extend(operator.allow_private);
        // `--resolve` answers come first; the operator's `[resolve]` adds names it does not set.
        resolve.insert_unset(&operator.resolve);
        Ok(Built {
            spec: PolicySpec {
                mode,
                allow,
                deny,
                operator_deny: operator.deny,
                allow_private,
                listening: Vec::new(),
            },
            resolve,
            env_pass: operator.env_pass,
        })
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let listen: SocketAddr = match args.listen.parse() {
        Ok(address) => address,
        Err(_) => {
            eprintln!(
                "cordon: `--listen {}` is not an address; write IP:PORT, such as `127.0.0.1:3128` or `[::1]:0`",
                args.listen
            );
            return Ok(ExitCode::from(USAGE_EXIT));
        }
    };
    let built = match args.policy.build(Mode::Allowlist) {
        Ok(built) => built,
        Err(problems) => {
            eprintln!("{problems}");
            return Ok(ExitCode::from(USAGE_EXIT));
        }
    };
    // A standalone proxy serves many clients for as long as it runs: repeats are coalesced, and
    // nothing is capped.
    let audit = match audit_sink(args.audit.as_deref(), usize::MAX) {
        Ok(audit) => audit,
        Err(problem) => {
            eprintln!("cordon: {problem}");
            return Ok(ExitCode::from(USAGE_EXIT));
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the proxy runtime")?;
    runtime.block_on(serve(listen, built, audit))
}

async fn serve(
    listen: SocketAddr,
    built: Built,
    audit: Arc<dyn AuditSink>,
) -> anyhow::Result<ExitCode> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}; pick a free address or port 0"))?;
    let bound = listener.local_addr()?;
    let mut spec = built.spec;
    // The proxy's own address is a `self` destination: a client must not loop through it.
    spec.listening.push(bound);
    let proxy = Proxy::new(ProxyConfig {
        policy: Arc::new(Policy::new(spec)),
        resolver: Arc::new(built.resolve.or(SystemResolver::default())),
        audit: Arc::clone(&audit),
        limits: Limits::default(),
    });
    let (shutdown, signal) = Shutdown::new();
    // Coalesced repeats are written once their second has passed, whether or not another
    // record comes.
    let flusher = {
        let audit = Arc::clone(&audit);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(cordon_egress::proxy::WINDOW);
            loop {
                every.tick().await;
                let _ = audit.flush();
            }
        })
    };
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening {bound}")?;
        stdout.flush()?;
    }
    let identity = Identity {
        listener: "proxy".to_owned(),
        step: None,
        attempt: None,
        credential: None,
    };
    let served = proxy.serve(listener, identity, signal);
    tokio::pin!(served);
    tokio::select! {
        result = &mut served => result?,
        _ = interrupt.recv() => { shutdown.trigger(); served.await?; }
        _ = terminate.recv() => { shutdown.trigger(); served.await?; }
    }
    flusher.abort();
    audit.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// Opens the audit sink for `--audit FILE` (none without it), coalescing repeats and keeping at
/// most `cap` records (`usize::MAX`: no cap).
pub fn audit_sink(path: Option<&Path>, cap: usize) -> Result<Arc<dyn AuditSink>, String> {
    match path {
        None => Ok(Arc::new(NoAudit)),
        Some(path) => JsonLinesSink::open(path, cap)
            .map(|sink| Arc::new(sink) as Arc<dyn AuditSink>)
            .map_err(|e| {
                format!(
                    "the audit file {} cannot be opened: {e}; pass a writable path to `--audit`",
                    path.display()
                )
            }),
    }
}

/// The egress proxy of one sandbox session (`cordon exec --allow …` / `--net open`): a small
/// runtime of its own serving the listener the session created inside its network namespace
/// (`Session::listen_proxy`). Stop it after the session's last command.
pub struct SessionProxy {
    runtime: tokio::runtime::Runtime,
    handle: ListenerHandle,
    audit: Arc<dyn AuditSink>,
}

impl SessionProxy {
    /// The runtime a session's proxy is served on. Start it before opening the session: a host
    /// process with threads gets an exec'd init, whose network namespace an unprivileged host
    /// may join to create the proxy's listener there (a single-threaded host gets an in-process,
    /// non-dumpable init that only a privileged host may join).
    pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cordon-egress")
            .enable_all()
            .build()
            .context("starting the egress proxy runtime")
    }

    /// Serves `listener` on `runtime` with the policy `built` describes, auditing to `audit`,
    /// under `identity`. Names the policy does not answer statically go to the system resolver.
    pub fn start(
        runtime: tokio::runtime::Runtime,
        listener: TcpListener,
        built: Built,
        audit: Arc<dyn AuditSink>,
        identity: Identity,
    ) -> anyhow::Result<SessionProxy> {
        let proxy = Proxy::new(ProxyConfig {
            policy: Arc::new(Policy::new(built.spec)),
            resolver: Arc::new(built.resolve.or(SystemResolver::default())),
            audit: Arc::clone(&audit),
            limits: Limits::default(),
        });
        let handle = proxy
            .spawn(runtime.handle(), listener, identity)
            .context("serving the session's egress proxy")?;
        Ok(SessionProxy {
            runtime,
            handle,
            audit,
        })
    }

    /// Stops accepting, lets open connections finish for the grace period, closes every socket
    /// the proxy held, and writes what the audit still holds (coalesced repeats, the dropped
    /// count).
    pub fn stop(self) {
        let _ = self.runtime.block_on(self.handle.stop());
        let _ = self.audit.finish();
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// A session hands over a listener; here a loopback one stands in for it.
    #[test]
    fn a_session_proxy_serves_the_handed_over_listener_until_stopped() {
        // An address of loopback's /8 that no other test binds: once the listener is gone, no
        // other test's ephemeral port can answer on it and make "stopped" look like "serving".
        let listener = TcpListener::bind("127.3.2.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        // An empty operator policy (a regular file: cordon reads no device as configuration).
        let policy = tempfile::NamedTempFile::new().expect("policy file");
        let args = PolicyArgs {
            allow: vec!["allowed.test".to_owned()],
            policy: Some(policy.path().to_path_buf()),
            ..PolicyArgs::default()
        };
        let built = args.build(Mode::Allowlist).expect("policy");
        let identity = Identity {
            listener: "exec".to_owned(),
            step: None,
            attempt: None,
            credential: None,
        };
        let runtime = SessionProxy::runtime().expect("runtime");
        let egress = SessionProxy::start(runtime, listener, built, Arc::new(NoAudit), identity)
            .expect("start the session proxy");
        let mut client = std::net::TcpStream::connect(address).expect("connect");
        client
            .write_all(b"CONNECT denied.test:443 HTTP/1.1\r\n\r\n")
            .expect("send");
        let mut response = String::new();
        client.read_to_string(&mut response).expect("read");
        assert!(
            response.starts_with("HTTP/1.1 403 Forbidden\r\nX-Cordon-Reason: not_allowed\r\n"),
            "{response}"
        );
        egress.stop();
        // Another test of this binary may have forked a helper at the moment the listener was
        // open: until the helper closes its inherited descriptors (its first act, once it gets a
        // CPU), its copy keeps the socket listening. So the refusal may take a moment — bounded.
        let refused = (0..200).any(|_| {
            std::net::TcpStream::connect(address).is_err() || {
                std::thread::sleep(std::time::Duration::from_millis(10));
                false
            }
        });
        assert!(refused, "the stopped proxy still accepts on {address}");
    }
}
