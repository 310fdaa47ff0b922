//! `cordon exec`: run one command in a fresh sandbox session, passing its stdin, stdout, stderr
//! and exit status through. With `--allow` (an allowlist) or `--net open` the session gets its own
//! egress proxy at `127.0.0.1:3128` inside its network namespace, under the same policy options
//! as `cordon proxy` (`--deny`, `--resolve`, `--allow-private`, `--policy`, `--audit`); after the
//! command each refused destination is named on stderr with its fix. cordon's own messages go to
//! stderr prefixed `cordon: `; it never
//! writes to stdout itself. Exit codes (DESIGN Appendix A): the command's own status; 124 timeout;
//! 125 cordon failed or refused (nothing ran, e.g. a requested cap cannot be enforced); 126 not
//! executable; 127 not found; 128+N signal N (137 also for an OOM kill, with a message).

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use cordon_egress::Mode;
use cordon_egress::proxy::Identity;
use cordon_protocol::text::escape_line;
use cordon_sandbox::cgroup::{self, Caps};
use cordon_sandbox::{
    ExecRequest, ExitStatus, InitProgram, InitStart, Network, Session, SessionConfig, Starting,
    Stdin, Stream, Workspace,
};

mod refusals;

/// Exit status for usage errors and refusals: nothing ran.
pub const USAGE_EXIT: u8 = 125;
/// Exit status when the timeout killed the command.
const TIMEOUT_EXIT: u8 = 124;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workspace directory, mounted read-write at its own path and the working directory
    /// [default: the current directory]
    #[arg(short = 'w', long = "workspace", value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Network: `none` gives the sandbox only its own loopback; `open` lets it reach every public
    /// name and port through its egress proxy. Any `--allow` means an allowlist instead
    #[arg(long = "net", value_name = "MODE", default_value = "none")]
    net: String,
    #[command(flatten)]
    egress: super::proxy::PolicyArgs,
    /// Append one JSON line per egress decision and per tunnel close to FILE (created 0600; never
    /// inside the workspace, where the command could rewrite it)
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Kill the command and everything it started after SECS seconds (exit 124)
    #[arg(long, value_name = "SECS", value_parser = whole_seconds)]
    timeout: Option<u64>,
    /// Cap memory, swap included (K/M/G are binary: 2G = 2 GiB; Ki/Mi/Gi accepted); the command
    /// is killed when it goes over (exit 137)
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// Cap the number of processes and threads
    #[arg(long, value_name = "N")]
    pids: Option<u64>,
    /// Cap CPU time as a number of CPUs (1.5 = one and a half)
    #[arg(long, value_name = "F")]
    cpus: Option<f64>,
    /// Set a variable in the sandbox's environment (repeatable)
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Mount a host path read-only at its own path (repeatable)
    #[arg(long = "ro", value_name = "PATH")]
    read_only: Vec<PathBuf>,
    /// Expose the host's NAME toolchain read-only with its `bin` on PATH: rust, python, node or
    /// go (repeatable)
    #[arg(long = "toolchain", value_name = "NAME")]
    toolchain: Vec<String>,
    /// Mount a persistent download cache: cargo, pip, npm, go or uv (repeatable). Kept in the
    /// state directory per workspace; `cordon cache ls` and `cordon cache clear` manage them
    #[arg(long = "cache", value_name = "NAME")]
    cache: Vec<String>,
    /// Run on an environment image as the sandbox's read-only `/`: a name or `sha256:<digest>`
    /// from `cordon image ls`, or a directory holding an unpacked root filesystem
    #[arg(long = "image", value_name = "REF")]
    image: Option<String>,
    /// With --image: a throwaway writable layer over the image, discarded when the command ends
    #[arg(long = "image-writable", requires = "image")]
    image_writable: bool,
    /// Run the command on a pseudo-terminal inside the sandbox connected to this terminal (its
    /// window size and changes passed on); without it stdin, stdout and stderr are pipes
    #[arg(short = 't', long = "tty")]
    tty: bool,
    /// The command to run and its arguments
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Clones the session's init before `cordon exec`'s arguments are parsed (`argv` without the
/// program name), when they cannot ask for egress: the child makes its namespaces (the costliest
/// step of a start) while the host parses, instead of after. `None` when an argument before `--` starts with `--net` or `--allow`: an egress
/// session needs its proxy's runtime, and with it an exec'd init (see
/// `SessionProxy::runtime`), before init is cloned. Only a guess at what the parser will find;
/// [`run`] drops a clone the parsed arguments cannot use and starts another. Nothing runs in
/// the clone before [`Starting::open`] (see `Session::start`).
pub fn start_early(argv: &[OsString]) -> Option<Starting> {
    if may_ask_for_egress(argv) {
        return None;
    }
    let program = InitProgram::current_exe().ok()?;
    Some(Session::start(
        &program,
        InitStart::InProcessWhenSingleThreaded,
    ))
}

/// `file` resolved (symlinks and all, also when it does not exist yet), or the error when that
/// lies inside the workspace, where the sandboxed command can change it.
fn outside_workspace(file: &Path, what: &str, config: &SessionConfig) -> anyhow::Result<PathBuf> {
    let absolute = std::path::absolute(file)?;
    // A file not made yet (an audit file) is resolved through its directory.
    let through_parent = || {
        let name = absolute.file_name()?;
        Some(absolute.parent()?.canonicalize().ok()?.join(name))
    };
    let resolved = absolute
        .canonicalize()
        .ok()
        .or_else(through_parent)
        .unwrap_or_else(|| absolute.clone());
    let workspace = config.workspace.path();
    if resolved.starts_with(workspace) {
        anyhow::bail!(
            "the {what} file {} is inside the workspace {}, where the sandboxed command can \
             change it; move it outside the workspace",
            file.display(),
            workspace.display()
        );
    }
    Ok(resolved)
}

/// `--timeout`'s value: whole seconds, with the fix when it is not.
fn whole_seconds(text: &str) -> Result<u64, String> {
    text.parse().map_err(|_| {
        format!("`--timeout {text}` is not a whole number of seconds; write it like `--timeout 60`")
    })
}

/// Whether an option before `--` could turn egress on (`--net …`, `--allow…`). Errs towards yes:
/// a wrong yes only costs the early start, a wrong no a dropped clone.
fn may_ask_for_egress(argv: &[OsString]) -> bool {
    argv.iter()
        .take_while(|arg| arg.as_os_str() != "--")
        .any(|arg| {
            let bytes = arg.as_bytes();
            bytes.starts_with(b"--net") || bytes.starts_with(b"--allow")
        })
}

/// Runs `cordon exec`; `early` is what [`start_early`] cloned, if anything.
pub fn run(args: Args, early: Option<Starting>) -> anyhow::Result<ExitCode> {
    match execute(args, early) {
        Ok(code) => Ok(code),
        Err(err) => {
            eprintln!("cordon: {err:#}");
            Ok(ExitCode::from(USAGE_EXIT))
        }
    }
}

fn execute(args: Args, early: Option<Starting>) -> anyhow::Result<ExitCode> {
    // Before any thread exists (the proxy's runtime): the signals that would end this process
    // are received instead, so the command is stopped and the terminal restored first.
    let signals = cordon_sandbox::terminal::Signals::block()
        .map_err(|err| anyhow::anyhow!("cannot take over the interrupt signals: {err}"))?;
    // The session always has its own network namespace; the proxy inside it is the only way out.
    let mode = match (args.net.as_str(), args.egress.allow.is_empty()) {
        ("none", true) => None,
        ("none", false) => Some(Mode::Allowlist),
        ("open", true) => Some(Mode::Open),
        ("open", false) => anyhow::bail!(
            "`--net open` already allows every name and port; drop `--allow`, or drop `--net open` \
             to allow only the `--allow` patterns"
        ),
        (other, _) => {
            anyhow::bail!("`--net {other}` is not a network mode; use `--net none` or `--net open`")
        }
    };
    // With egress, the proxy's runtime exists before init is cloned (see `SessionProxy::runtime`):
    // an early clone made for a single-threaded host is dropped (which kills it) first.
    let (runtime, early) = match mode {
        None => (None, early),
        Some(_) => {
            drop(early);
            (Some(super::proxy::SessionProxy::runtime()?), None)
        }
    };
    // Clone init now: its child makes the session's namespaces (the costliest step of a start) on
    // its own CPU while this thread reads the policy, opens the workspace and builds the
    // configuration. It runs nothing until `Starting::open` has checked every layer, and a usage
    // error below drops it, which kills it. One session, one command: init may run in the cloned
    // child without loading this binary again (the largest single start-up cost). This process
    // holds nothing secret beyond its own environment, and init's memory is out of the sandbox's
    // reach (see `InitStart`).
    let starting = match early {
        Some(starting) => starting,
        None => Session::start(
            &InitProgram::current_exe()?,
            InitStart::InProcessWhenSingleThreaded,
        ),
    };
    // The options and the operator policy are checked even for an offline session, so a typo is
    // an error rather than a silently ignored flag.
    let built = args
        .egress
        .build(mode.unwrap_or(Mode::Allowlist))
        .map_err(|problems| anyhow::anyhow!("{problems}"))?;
    let network = Network::None;
    if args.tty && !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        anyhow::bail!(
            "`-t` needs a terminal on standard input, and this one is a pipe or a file; run it \
             from a terminal, or drop `-t` to pass stdin, stdout and stderr as pipes"
        );
    }
    let timeout = match args.timeout {
        Some(0) => {
            anyhow::bail!("`--timeout 0` would kill the command at once; give at least 1 second")
        }
        other => other.map(Duration::from_secs),
    };
    let env = args
        .env
        .iter()
        .map(|pair| parse_variable(pair))
        .collect::<Result<Vec<_>, _>>()?;
    let memory = args
        .memory
        .as_deref()
        .map(|text| cgroup::parse_size(text).map_err(|e| anyhow::anyhow!("`--memory {text}`: {e}")))
        .transpose()?;
    let caps = Caps {
        memory,
        pids: args.pids,
        cpus: args.cpus,
    };
    let workspace = match args.workspace {
        Some(dir) => dir,
        None => std::env::current_dir()?,
    };

    let mut config = SessionConfig::new(Workspace::open(&workspace)?, starting.program().clone());
    config.network = network;
    config.read_only = args.read_only;
    config.toolchains = toolchains(&args.toolchain, config.workspace.path())?;
    config.caches = caches(&args.cache, config.workspace.path())?;
    config.image = match &args.image {
        Some(reference) => Some(image(reference, args.image_writable)?),
        None => None,
    };
    // The operator's `[env] pass`: host values in, the files they name read-only.
    let names: Vec<&str> = built.env_pass.iter().map(|n| n.as_str()).collect();
    let (passed, files) =
        cordon_sandbox::environment::passed(&names, &|name| std::env::var_os(name));
    config.passed = passed;
    config.read_only.extend(files);
    config.mask = private_paths();
    if let Some(file) = &args.egress.policy {
        // The operator policy is never inside the workspace, where the command could change
        // it, and never visible in the sandbox.
        config
            .mask
            .push(outside_workspace(file, "operator policy", &config)?);
    }
    // Nor is the audit file, which the command could otherwise rewrite after the fact. It is
    // opened (created 0600) even for an offline session: a bad path is an error rather than an
    // ignored flag, and the empty file says truly that nothing was decided.
    if let Some(file) = &args.audit {
        outside_workspace(file, "audit", &config)?;
    }
    // A session's audit is bounded as a run's is: coalesced, at most 10,000 records.
    let audit =
        super::proxy::audit_sink(args.audit.as_deref(), cordon_egress::proxy::SESSION_RECORDS)
            .map_err(|p| anyhow::anyhow!("{p}"))?;
    // Every refused destination is also remembered, for the lines printed after the command.
    let refusals = Arc::new(refusals::Refusals::new(audit));
    let egress = mode.map(|_| {
        (
            built,
            refusals.clone() as Arc<dyn cordon_egress::proxy::AuditSink>,
        )
    });
    config.caps = caps;
    config.init_start = InitStart::InProcessWhenSingleThreaded;
    let egress = egress
        .zip(runtime)
        .map(|((built, audit), runtime)| (built, audit, runtime));
    // The command is sent right behind the setup message (see `Starting::open_without_waiting`);
    // a setup failure comes back from `exec` (or `listen_proxy`) instead.
    let mut session = starting.open_without_waiting(config)?;
    let proxy = match egress {
        None => None,
        Some((built, audit, runtime)) => {
            let identity = Identity {
                listener: "exec".to_owned(),
                step: None,
                attempt: None,
                credential: None,
            };
            Some(super::proxy::SessionProxy::start(
                runtime,
                session.listen_proxy()?,
                built,
                audit,
                identity,
            )?)
        }
    };

    let mut request = ExecRequest::new(args.command.clone());
    request.env = env;
    request.stdin = if args.tty {
        Stdin::Terminal
    } else {
        Stdin::Inherit
    };
    let terminal = Terminal::of_this_process();
    // On a terminal the pty inside echoes, edits lines and turns keys into signals: the user's
    // terminal passes every key through until the command ends. Either way the terminal gets its
    // settings back when this function returns, after the farewell (see `Terminal`).
    let mut guard = terminal.guard(args.tty)?;
    request.timeout = timeout;
    // The output goes straight through; `cordon exec` keeps no capture.
    request.capture_limit = 0;
    let (stdout, stderr) = (std::io::stdout(), std::io::stderr());
    let mut filters = terminal.filters();
    let mut filtered = Vec::new();
    let mut interrupted = None;
    let mut on_signal = |_: &Session| match signals.pending() {
        Some(signal) => {
            interrupted = Some(signal);
            cordon_sandbox::Tick::Stop {
                reason: format!("interrupted by signal {signal}"),
            }
        }
        None => cordon_sandbox::Tick::Continue,
    };
    let watch = cordon_sandbox::Watch {
        every: Duration::from_millis(100),
        tick: &mut on_signal,
    };
    let outcome = session.exec_watched(&request, Some(watch), &mut |stream, bytes| {
        let index = usize::from(stream == Stream::Stderr);
        let bytes = match &mut filters[index] {
            Some(filter) => {
                filtered.clear();
                filter.push(bytes, &mut filtered);
                filtered.as_slice()
            }
            None => bytes,
        };
        // A closed stdout (`cordon exec ... | head`) must not stop the command; drop the bytes.
        let _ = match stream {
            Stream::Stdout => stdout
                .lock()
                .write_all(bytes)
                .and_then(|()| stdout.lock().flush()),
            Stream::Stderr => stderr.lock().write_all(bytes),
        };
    })?;
    if outcome.stopped.as_deref() == Some(cordon_sandbox::ESCAPE_STOPPED) {
        eprint!("\r\ncordon: {}\r\n", cordon_sandbox::ESCAPE_STOPPED);
    }
    // This process exits next: end the session without waiting for init's teardown when nothing
    // else runs in it (see `Session::close_for_exit`).
    session.close_for_exit();
    // Nothing of the session writes to the terminal any more: the farewell, then its settings.
    let left = filters
        .iter()
        .flatten()
        .fold(cordon_protocol::terminal::Left::default(), |left, f| {
            left.or(f.left())
        });
    let farewell = cordon_protocol::terminal::farewell(left);
    match guard.as_mut() {
        Some(guard) => {
            guard.set_farewell(&[&farewell[..], cordon_protocol::terminal::STATUS_QUERY].concat());
        }
        None => terminal.reset(&farewell),
    }
    drop(guard);
    if let Some(signal) = interrupted {
        eprintln!(
            "cordon: interrupted (signal {signal}); the command and everything it started were \
             stopped"
        );
        return Ok(ExitCode::from(128 + signal.clamp(0, 127) as u8));
    }
    if let Some(proxy) = proxy {
        proxy.stop();
        for line in refusals.lines() {
            eprintln!("{line}");
        }
    }

    let program = &args.command[0];
    if let Some(message) = &outcome.oom {
        eprintln!("cordon: {message}");
    }
    if outcome.timed_out {
        eprintln!(
            "cordon: `{program}` timed out after {} s; it and every process it started were killed",
            timeout.unwrap_or_default().as_secs()
        );
        return Ok(ExitCode::from(TIMEOUT_EXIT));
    }
    match outcome.status {
        ExitStatus::NotFound => {
            let home = cordon_sandbox::host_user().home;
            let home = home.canonicalize().unwrap_or(home);
            let var = |name: &str| std::env::var_os(name);
            let facts = cordon_sandbox::toolchain::HostFacts {
                home: &home,
                var: &var,
                workspace: None,
            };
            match cordon_sandbox::toolchain::hidden_program(program, &facts) {
                Some((path, toolchain)) => {
                    let dir = path.parent().unwrap_or(Path::new("/"));
                    // Never the home itself (or an ancestor): that would expose all of it.
                    let fix = match toolchain {
                        Some(toolchain) => {
                            format!("expose it with `--toolchain {}`", toolchain.name())
                        }
                        None if home.starts_with(dir) => {
                            "move it to a directory of its own and expose that with `--ro DIR`"
                                .to_owned()
                        }
                        None => format!(
                            "expose it with `--ro {}`",
                            escape_line(&dir.display().to_string())
                        ),
                    };
                    eprintln!(
                        "cordon: `{}` not found in the sandbox; the host has it at {}, in the \
                         home directory the sandbox hides: {fix}",
                        escape_line(program),
                        escape_line(&path.display().to_string())
                    );
                }
                None => eprintln!(
                    "cordon: `{}` not found in the sandbox (check PATH and the mounted paths)",
                    escape_line(program)
                ),
            }
        }
        ExitStatus::NotExecutable => {
            eprintln!("cordon: `{program}` is not executable in the sandbox")
        }
        ExitStatus::Code(_) | ExitStatus::Signal(_) => {}
    }
    Ok(ExitCode::from(
        u8::try_from(outcome.exit_code()).unwrap_or(u8::MAX),
    ))
}

/// Which of this process's standard streams are terminals, for what the command's output may
/// send to them (DESIGN §11, threat model "Terminals").
struct Terminal {
    stdin: bool,
    stdout: bool,
    stderr: bool,
}

impl Terminal {
    fn of_this_process() -> Terminal {
        use std::io::IsTerminal;
        Terminal {
            stdin: std::io::stdin().is_terminal(),
            stdout: std::io::stdout().is_terminal(),
            stderr: std::io::stderr().is_terminal(),
        }
    }

    /// A filter for each output stream that is a terminal: no question reaches it, so no answer
    /// can be typed into the user's shell after the command.
    fn filters(&self) -> [Option<cordon_protocol::terminal::Filter>; 2] {
        let utf8 = utf8_locale(&|name| std::env::var_os(name));
        [self.stdout, self.stderr]
            .map(|tty| tty.then(|| cordon_protocol::terminal::Filter::for_terminal(utf8)))
    }

    /// With the user's terminal on stdin and an output: its settings saved (raw for `-t`), and
    /// on drop the modes the command may have turned on reset, answers still on their way read
    /// until the terminal has answered cordon's own last question, queued input discarded and
    /// the settings restored. Without a terminal on stdin there is nothing to save or read:
    /// [`Terminal::reset`] writes the resets alone.
    fn guard(&self, raw: bool) -> anyhow::Result<Option<cordon_sandbox::terminal::TerminalGuard>> {
        use cordon_protocol::terminal::{STATUS_ANSWER, STATUS_QUERY, farewell};
        use std::os::fd::AsFd;
        let (stdout, stderr) = (std::io::stdout(), std::io::stderr());
        let output = match (self.stdout, self.stderr) {
            (true, _) => stdout.as_fd(),
            (false, true) => stderr.as_fd(),
            (false, false) => return Ok(None),
        };
        // A background job (`cordon exec … &`) leaves the terminal's settings alone: changing
        // them would stop it (`SIGTTOU`).
        if !self.stdin || !cordon_sandbox::terminal::is_foreground(std::io::stdin().as_fd()) {
            return Ok(None);
        }
        let farewell = [&farewell(Default::default())[..], STATUS_QUERY].concat();
        let guard = cordon_sandbox::terminal::TerminalGuard::save(
            std::io::stdin().as_fd(),
            output,
            &farewell,
            STATUS_ANSWER,
        )
        .map_err(|err| anyhow::anyhow!("cannot read the terminal's settings: {err}"))?;
        if raw {
            guard
                .raw()
                .map_err(|err| anyhow::anyhow!("cannot put the terminal in raw mode: {err}"))?;
        }
        Ok(Some(guard))
    }
}

impl Terminal {
    /// The farewell alone, when there is no guard (stdin is not a terminal, or this is a
    /// background job — which wrote the command's output to the terminal all the same).
    fn reset(&self, bytes: &[u8]) {
        let _ = if self.stdout {
            std::io::stdout()
                .lock()
                .write_all(bytes)
                .and_then(|()| std::io::stdout().flush())
        } else if self.stderr {
            std::io::stderr().lock().write_all(bytes)
        } else {
            Ok(())
        };
    }
}

/// Whether the terminal reads UTF-8, as the locale says (`LC_ALL`, else `LC_CTYPE`, else
/// `LANG`, the first one set): `UTF-8` or `utf8` in it, any case. Anything else (`C`, `POSIX`,
/// Latin-1, none at all) counts as a single-byte terminal, for which the filter is stricter.
fn utf8_locale(var: &dyn Fn(&str) -> Option<OsString>) -> bool {
    ["LC_ALL", "LC_CTYPE", "LANG"]
        .iter()
        .find_map(|name| var(name).filter(|v| !v.is_empty()))
        .is_some_and(|locale| {
            let locale = locale.to_string_lossy().to_ascii_lowercase();
            locale.contains("utf-8") || locale.contains("utf8")
        })
}

/// The `--cache` names opened in the state directory's cache store, keyed by the workspace;
/// `None` without any. A cache found over the limit is emptied first and said so.
/// The image `--image REF` names: a store image, or (on the command line only) a directory.
fn image(reference: &str, writable: bool) -> anyhow::Result<cordon_sandbox::ImageRoot> {
    let parsed = cordon_protocol::ImageRef::parse(reference)
        .map_err(|e| anyhow::anyhow!("`--image {}`: {e}", escape_line(reference)))?;
    let state_dir = cordon_store::StateDir::resolve(&cordon_store::StateDirSource::from_env(None))?;
    let resolved = cordon_image::Images::at(state_dir.path()).resolve(&parsed)?;
    Ok(cordon_sandbox::ImageRoot::open(
        &resolved.rootfs,
        writable,
        resolved.path,
    )?)
}

fn caches(
    names: &[String],
    workspace: &Path,
) -> anyhow::Result<Option<cordon_sandbox::cache::Opened>> {
    use cordon_sandbox::cache::{self, Cache, Owner, Store};
    if names.is_empty() {
        return Ok(None);
    }
    let wanted = names
        .iter()
        .map(|name| {
            Cache::parse(name).ok_or_else(|| {
                anyhow::anyhow!("`--cache {name}` is not a cache; use {}", cache::NAMES)
            })
        })
        .collect::<anyhow::Result<Vec<Cache>>>()?;
    let state_dir = cordon_store::StateDir::resolve(&cordon_store::StateDirSource::from_env(None))?;
    state_dir.refuse_inside(workspace)?;
    let opened = Store::new(state_dir.path()).open(
        &Owner::Exec(workspace.to_path_buf()),
        &wanted,
        cache::DEFAULT_LIMIT,
    )?;
    for emptied in &opened.emptied {
        eprintln!("cordon: {}", emptied.message("the cache limit"));
    }
    Ok(Some(opened))
}

/// The exposure of the `--toolchain` names, found on the host now.
fn toolchains(
    names: &[String],
    workspace: &Path,
) -> anyhow::Result<cordon_sandbox::toolchain::Exposure> {
    use cordon_sandbox::toolchain::{self, Toolchain};
    let mut wanted = Vec::new();
    for name in names {
        let Some(toolchain) = Toolchain::parse(name) else {
            anyhow::bail!("`--toolchain {name}` is not a toolchain; use rust, python, node or go");
        };
        if !wanted.contains(&toolchain) {
            wanted.push(toolchain);
        }
    }
    toolchain::expose(&wanted, &|name| std::env::var_os(name), Some(workspace))
        .map_err(|err| anyhow::anyhow!("`--toolchain`: {err}"))
}

fn parse_variable(pair: &str) -> anyhow::Result<(String, String)> {
    match pair.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => anyhow::bail!("`-e {pair}` is not KEY=VALUE; write it as `-e NAME=value`"),
    }
}

/// Paths the sandbox must never see, wherever they are: the state directory and the operator
/// policy file (DESIGN Appendix A "Paths" and §5). The binary itself is masked by the library.
fn private_paths() -> Vec<PathBuf> {
    let env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home = env("HOME");
    let under_home = |rest: &str| home.as_ref().map(|h| h.join(rest));
    let state = env("CORDON_STATE_DIR")
        .or_else(|| env("XDG_STATE_HOME").map(|d| d.join("cordon")))
        .or_else(|| under_home(".local/state/cordon"));
    let policy = env("XDG_CONFIG_HOME")
        .map(|d| d.join("cordon/policy.toml"))
        .or_else(|| under_home(".config/cordon/policy.toml"));
    [state, policy]
        .into_iter()
        .flatten()
        .filter(|p| Path::new(p).is_absolute())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_locale_decides_whether_the_terminal_reads_utf8() {
        for (vars, utf8) in [
            (&[("LANG", "en_US.UTF-8")][..], true),
            (&[("LC_ALL", "C"), ("LANG", "en_US.UTF-8")], false),
            (&[("LC_ALL", ""), ("LC_CTYPE", "de_DE.utf8")], true),
            (&[("LANG", "C")], false),
            (&[("LANG", "fr_FR.ISO-8859-1")], false),
            (&[], false),
        ] {
            let var = |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| OsString::from(v))
            };
            assert_eq!(utf8_locale(&var), utf8, "{vars:?}");
        }
    }

    #[test]
    fn only_options_before_the_command_can_ask_for_egress() {
        let rows: [(&[&str], bool); 9] = [
            (&["--", "true"], false),
            (&["-w", "/tmp/ws", "--", "true"], false),
            (&["--allow", "example.com", "--", "true"], true),
            (&["--allow=example.com", "--", "true"], true),
            (&["--allow-private", "10.0.0.0/8", "--", "true"], true),
            (&["--net", "open", "--", "true"], true),
            (&["--net=none", "--", "true"], true),
            // The command's own arguments are not cordon's.
            (&["--", "curl", "--allow", "--net"], false),
            (&["-e", "A=1", "--timeout", "5", "--", "env"], false),
        ];
        for (argv, expected) in rows {
            let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
            assert_eq!(may_ask_for_egress(&argv), expected, "{argv:?}");
        }
    }

    #[test]
    fn variables_must_be_key_equals_value() {
        let rows: [(&str, Option<(&str, &str)>); 5] = [
            ("A=1", Some(("A", "1"))),
            ("A=", Some(("A", ""))),
            ("A=b=c", Some(("A", "b=c"))),
            ("A", None),
            ("=x", None),
        ];
        for (pair, expected) in rows {
            let got = parse_variable(pair).ok();
            let expected = expected.map(|(k, v)| (k.to_owned(), v.to_owned()));
            assert_eq!(got, expected, "{pair}");
        }
    }
}
