//! Identity: workspace files keep their owner, user lookups work, HOME is a fresh tmpfs.

use std::os::unix::fs::MetadataExt;

use crate::support::*;

#[test]
fn workspace_files_keep_the_workspace_owner() {
    let ws = workspace();
    // As root the workspace belongs to someone else, as it would for `sudo cordon`; the files the
    // sandbox (an unowned uid) writes must end up owned by that someone.
    let (uid, gid) = if running_as_root() {
        (4242, 4243)
    } else {
        let user = cordon_sandbox::host_user();
        (user.uid, user.gid)
    };
    if running_as_root() {
        std::os::unix::fs::chown(ws.path(), Some(uid), Some(gid)).expect("chown the workspace");
    }
    let mut session = open(ws.path());
    let out = sh(&mut session, "echo x > made && mkdir dir && id -u");
    let meta = std::fs::metadata(ws.path().join("made")).expect("the file reached the host");
    assert_eq!((meta.uid(), meta.gid()), (uid, gid), "{out:?}");
    assert_eq!(
        std::fs::metadata(ws.path().join("dir")).expect("dir").uid(),
        uid
    );
    let inside: u32 = stdout(&out).trim().parse().expect("id -u");
    assert_ne!(inside, 0, "the sandbox runs as uid 0");
    assert_eq!(inside, session.identity().uid);
}

#[test]
fn user_lookups_name_the_invoking_user() {
    let ws = workspace();
    let mut session = open(ws.path());
    let name = cordon_sandbox::host_user().name;
    let out = sh(
        &mut session,
        "id -un; python3 -c 'import os, pwd; print(pwd.getpwuid(os.getuid()).pw_name)'; echo $HOME; touch $HOME/made && echo home-writable",
    );
    let home = session.identity().home.display().to_string();
    assert_eq!(
        stdout(&out),
        format!("{name}\n{name}\n{home}\nhome-writable\n"),
        "{out:?}"
    );
    assert!(
        !session.identity().home.join("made").exists(),
        "HOME is the host's home, not a tmpfs"
    );
}
