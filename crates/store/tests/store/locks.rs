//! Run and workspace locks: one holder at a time, released on drop.

use crate::{run, store};

#[test]
fn a_held_run_cannot_be_taken_twice() {
    let (_dir, store) = store();
    let a = run(&store, 1);
    assert!(!store.is_held(a));
    let lock = store.lock_run(a).expect("first holder");
    assert!(store.is_held(a));
    let err = store.lock_run(a).expect_err("second holder");
    assert!(
        err.to_string()
            .contains("is held by another cordon process"),
        "{err}"
    );
    drop(lock);
    assert!(!store.is_held(a));
    assert!(store.lock_run(a).is_ok(), "released on drop");
}

#[test]
fn one_run_per_workspace() {
    let (dir, store) = store();
    let first = store.lock_workspace(dir.path()).expect("lock");
    assert!(first.is_some());
    assert!(store.lock_workspace(dir.path()).expect("lock").is_none());
    assert!(
        store
            .lock_workspace(&dir.path().join("other"))
            .expect("lock")
            .is_some()
    );
}
