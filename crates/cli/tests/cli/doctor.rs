//! `cordon doctor`: the layer report in text and JSON, its exit codes, and the
//! `CORDON_PROBE_REMOVE` override that makes missing layers reproducible on any machine.

use std::process::Output;

use crate::support::cordon;

const EVERY_LAYER: &str = "user_namespaces,mount_namespaces,pid_namespaces,network_namespaces,\
    seccomp,no_new_privs,landlock,landlock_scopes,idmapped_mounts,overlayfs,cgroups";

fn doctor(args: &[&str], remove: Option<&str>) -> Output {
    let mut cmd = cordon();
    cmd.arg("doctor")
        .args(args)
        .env_remove("CORDON_PROBE_REMOVE");
    if let Some(remove) = remove {
        cmd.env("CORDON_PROBE_REMOVE", remove);
    }
    cmd.output().expect("run cordon doctor")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Replaces the detail of every available layer, which names this machine's kernel, paths and
/// user, with `[detail]`; missing layers keep theirs (the override's wording).
fn redact_available_details(text: &str) -> String {
    // The toolchains differ between users and machines: their lines are redacted to the names.
    let mut in_toolchains = false;
    text.lines()
        .map(|line| {
            if line.starts_with("toolchains (") {
                in_toolchains = true;
                return line.to_owned();
            }
            if in_toolchains {
                if line.is_empty() {
                    in_toolchains = false;
                } else {
                    return format!(
                        "  {} [found or where cordon looked]",
                        line.split_whitespace().next().unwrap_or("")
                    );
                }
            }
            let columns: Vec<&str> = line.split_whitespace().collect();
            match columns.as_slice() {
                [name, need, "ok", ..] => format!("{name:<18}  {need:<8}  ok       [detail]"),
                _ => line.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn doctor_reports_removed_layers_with_remedies_and_exits_3() {
    // cgroups differ between root and an unprivileged user, so they are removed too.
    let output = doctor(&[], Some("landlock,cgroups"));
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    insta::assert_snapshot!(redact_available_details(&stdout(&output)));
}

#[test]
fn doctor_json_has_the_contract_shape_for_every_layer() {
    let output = doctor(&["--json"], Some(EVERY_LAYER));
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    // One layer per line, for a readable snapshot; the output itself is one line.
    insta::assert_snapshot!(stdout(&output).replace("},{", "},\n{"));
}

#[test]
fn doctor_passes_on_this_machine_and_lists_every_layer() {
    // Control for the removal tests: without an override this machine has every required layer.
    let output = doctor(&["--json"], None);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let json = stdout(&output);
    assert!(json.starts_with(r#"{"sandbox":true,"layers":[{"name":"user_namespaces","available":true,"detail":"created one "#), "{json}");
    let names: Vec<&str> = EVERY_LAYER.split(',').collect();
    for name in names {
        assert!(
            json.contains(&format!(r#"{{"name":"{name}","available":"#)),
            "{name} in {json}"
        );
    }
}

#[test]
fn doctor_exits_0_when_only_optional_layers_are_missing() {
    let output = doctor(&[], Some("landlock_scopes,idmapped_mounts,cgroups"));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(stdout(&output).ends_with("sandbox: available (every required layer is present)\n"));
}

#[test]
fn doctor_refuses_an_unknown_layer_in_the_override() {
    let output = doctor(&[], Some("landlock,landlok"));
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(output.stdout.is_empty());
    insta::assert_snapshot!(String::from_utf8_lossy(&output.stderr));
}

#[test]
fn doctor_names_the_sysctl_when_user_namespaces_are_disabled() {
    // A real refusal, not an override: inside a user namespace of its own, the test sets
    // user.max_user_namespaces to 0 (a per-namespace limit), so cordon cannot create one.
    // cgroups are removed because their detail names this machine's paths.
    let script = "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" doctor";
    let output = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "sh", "-c", script])
        .arg(crate::support::cordon_bin())
        .env("NO_COLOR", "1")
        .env("CORDON_PROBE_REMOVE", "cgroups")
        .output()
        .expect("run unshare");
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    insta::assert_snapshot!(redact_available_details(&stdout(&output)));
}

#[test]
fn doctor_lists_each_toolchain_where_it_is_or_where_cordon_looked() {
    let output = doctor(&[], None);
    let text = stdout(&output);
    let section = text
        .split("toolchains (for isolation.toolchains and --toolchain):\n")
        .nth(1)
        .expect("a toolchains section");
    let lines: Vec<&str> = section.lines().take_while(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 4, "{section}");
    for (line, name) in lines.iter().zip(["rust", "python", "node", "go"]) {
        assert!(line.starts_with(&format!("  {name}")), "{line}");
    }
    // rust: where the sandbox would find it, or where cordon looked.
    let home = cordon_sandbox::host_user().home;
    let rustup = std::env::var_os("RUSTUP_HOME")
        .map_or_else(|| home.join(".rustup"), std::path::PathBuf::from);
    if rustup.join("toolchains").is_dir() {
        assert!(
            lines[0].contains(&rustup.display().to_string()),
            "{}",
            lines[0]
        );
    } else {
        assert!(lines[0].contains("not found (looked for"), "{}", lines[0]);
    }
}
