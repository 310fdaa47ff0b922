//! `cordon proxy`: curl through it on loopback (CONNECT and absolute-form), the audit file, a
//! clean stop on SIGTERM, and exit 2 with the fix for every bad option.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::cordon;

/// A loopback HTTP upstream answering every request with `hello from upstream`, on a thread
/// that serves at most `count` connections.
fn upstream(count: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
    let address = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        for stream in listener.incoming().take(count) {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match stream.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let body = "hello from upstream\n";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    address
}

/// A running `cordon proxy`, stopped with SIGTERM when dropped.
struct Running {
    child: Child,
    address: String,
}

impl Running {
    fn start(args: &[&str], config_home: &Path) -> Running {
        let mut child = cordon()
            .arg("proxy")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("XDG_CONFIG_HOME", config_home)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start cordon proxy");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the first line");
        let address = line
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("first line is `listening ADDR`, got {line:?}"))
            .trim()
            .to_owned();
        Running { child, address }
    }

    /// Sends SIGTERM and returns the exit code.
    fn stop(mut self) -> Option<i32> {
        terminate(&self.child);
        let status = self.child.wait().expect("wait for cordon proxy");
        status.code()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn terminate(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}

fn curl(proxy: &str, extra: &[&str], url: &str) -> (String, String) {
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--include", "--max-time", "10"])
        .args(["--noproxy", "", "--proxy", &format!("http://{proxy}")])
        .args(extra)
        .arg(url)
        .output()
        .expect("run curl");
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn cordon_proxy_serves_curl_through_connect_and_absolute_form_and_audits_both() {
    let config = tempfile::tempdir().expect("tempdir");
    let upstream = upstream(2);
    let port = upstream.port();
    let audit = config.path().join("audit.jsonl");
    let allow = format!("web.test:{port}");
    let running = Running::start(
        &[
            "--allow",
            &allow,
            "--resolve",
            "web.test=127.0.0.1",
            "--resolve",
            "other.test=127.0.0.1",
            "--allow-private",
            "127.0.0.0/8",
            "--audit",
            audit.to_str().expect("utf-8 path"),
        ],
        config.path(),
    );
    let url = format!("http://web.test:{port}/");
    let (plain, _) = curl(&running.address, &[], &url);
    assert!(plain.ends_with("hello from upstream\n"), "{plain}");
    let (tunnelled, _) = curl(&running.address, &["--proxytunnel"], &url);
    assert!(
        tunnelled.starts_with("HTTP/1.1 200 Connection established"),
        "{tunnelled}"
    );
    assert!(tunnelled.ends_with("hello from upstream\n"), "{tunnelled}");
    // Control: another name on the same address is refused, with its reason.
    let (refused, _) = curl(&running.address, &[], &format!("http://other.test:{port}/"));
    assert!(refused.starts_with("HTTP/1.1 403 Forbidden"), "{refused}");
    assert!(
        refused.contains("X-Cordon-Reason: not_allowed"),
        "{refused}"
    );
    assert_eq!(running.stop(), Some(0));
    let text = std::fs::read_to_string(&audit).expect("read the audit file");
    let lines: Vec<&str> = text.lines().collect();
    // http decision + close, connect decision + close, one deny.
    assert_eq!(lines.len(), 5, "{text}");
    assert!(lines[0].contains(r#""proto":"http""#) && lines[0].contains(r#""decision":"allow""#));
    assert!(lines[2].contains(r#""proto":"connect""#), "{}", lines[2]);
    assert!(
        lines[4].contains(r#""reason":"not_allowed""#),
        "{}",
        lines[4]
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&audit)
        .expect("stat")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}

/// `cordon proxy ARGS` that must refuse: exit 2, stderr containing `message`, nothing served.
fn check_refused<S: AsRef<std::ffi::OsStr>>(args: &[S], config_home: &Path, message: &str) {
    let output = cordon()
        .arg("proxy")
        .args(args)
        .env("XDG_CONFIG_HOME", config_home)
        .output()
        .expect("run cordon proxy");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{message}: {stderr}");
    assert!(output.stdout.is_empty(), "{message}");
    assert!(stderr.contains(message), "{message}: {stderr}");
}

#[test]
fn cordon_proxy_refuses_bad_options_with_the_fix_and_exit_2() {
    let config = tempfile::tempdir().expect("tempdir");
    let listen = ["--listen", "127.0.0.1:0"];
    let with = |extra: &[&str]| -> Vec<String> {
        listen
            .iter()
            .chain(extra)
            .map(|s| (*s).to_owned())
            .collect()
    };
    check_refused(
        &with(&["--allow", "10.0.0.1"]),
        config.path(),
        "`--allow 10.0.0.1`: `10.0.0.1` is an IP literal; write an ip: rule such as `ip:10.0.0.1:443`",
    );
    check_refused(
        &with(&["--deny", "*.com"]),
        config.path(),
        "`--deny *.com`: `*.com` needs at least two labels after `*.`",
    );
    check_refused(
        &with(&["--resolve", "example.test"]),
        config.path(),
        "`--resolve example.test`: `example.test` is not `HOST=ADDRESS`",
    );
    check_refused(
        &with(&["--allow-private", "10.0.0.1/8"]),
        config.path(),
        "`--allow-private 10.0.0.1/8`",
    );
    check_refused(
        &["--listen", "localhost:3128"],
        config.path(),
        "`--listen localhost:3128` is not an address; write IP:PORT",
    );
    let missing = config.path().join("missing.toml");
    check_refused(
        &with(&["--policy", missing.to_str().expect("utf-8")]),
        config.path(),
        "fix the path given to `--policy`",
    );
    let policy = config.path().join("policy.toml");
    std::fs::write(&policy, "deny = [\"10.0.0.1\"]\n").expect("write policy");
    check_refused(
        &with(&["--policy", policy.to_str().expect("utf-8")]),
        config.path(),
        "policy.toml:1:",
    );
    // The default policy file is read too: the same bad file at the default path.
    std::fs::create_dir_all(config.path().join("cordon")).expect("mkdir");
    std::fs::copy(&policy, config.path().join("cordon/policy.toml")).expect("copy");
    check_refused(&listen, config.path(), "cordon/policy.toml:1:");
}

#[test]
fn cordon_proxy_applies_the_operator_policy_file() {
    let config = tempfile::tempdir().expect("tempdir");
    let upstream = upstream(1);
    let port = upstream.port();
    let policy = config.path().join("operator.toml");
    std::fs::write(
        &policy,
        "deny = [\"blocked.test\"]\nallow_private = [\"127.0.0.0/8\"]\n[resolve]\n\"web.test\" = \"127.0.0.1\"\n\"blocked.test\" = \"127.0.0.1\"\n",
    )
    .expect("write policy");
    let allow_web = format!("web.test:{port}");
    let allow_blocked = format!("blocked.test:{port}");
    let running = Running::start(
        &[
            "--allow",
            &allow_web,
            "--allow",
            &allow_blocked,
            "--policy",
            policy.to_str().expect("utf-8"),
        ],
        config.path(),
    );
    let (allowed, _) = curl(&running.address, &[], &format!("http://web.test:{port}/"));
    assert!(allowed.ends_with("hello from upstream\n"), "{allowed}");
    let (denied, _) = curl(
        &running.address,
        &[],
        &format!("http://blocked.test:{port}/"),
    );
    assert!(
        denied.contains("X-Cordon-Reason: denied_operator"),
        "{denied}"
    );
    assert_eq!(running.stop(), Some(0));
}

#[test]
fn proxy_help_documents_the_policy_options() {
    let out = cordon()
        .args(["proxy", "--help"])
        .env("COLUMNS", "100")
        .output()
        .expect("run cordon");
    assert_eq!(out.status.code(), Some(0));
    insta::assert_snapshot!("proxy_help", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn cordon_proxy_on_a_busy_address_exits_1_naming_it() {
    let config = tempfile::tempdir().expect("tempdir");
    let busy = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = busy.local_addr().expect("address").to_string();
    let output = cordon()
        .args(["proxy", "--listen", &address])
        .env("XDG_CONFIG_HOME", config.path())
        .output()
        .expect("run cordon proxy");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot listen on {address}; pick a free address or port 0"
        )),
        "{stderr}"
    );
}
