//! `cordon doctor`: the layer report in text and JSON, its exit codes, and the
//! `CORDON_PROBE_REMOVE` override that makes missing layers reproducible on any machine.

use std::process::Output;

use crate::support::cordon;

const EVERY_LAYER: &str = "user_namespaces,mount_namespaces,pid_namespaces,network_namespaces,\
    seccomp,no_new_privs,landlock,landlock_scopes,idmapped_mounts,cgroups";

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
    text.lines()
        .map(|line| {
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
