//! Run and workspace locks: one holder at a time, released on drop.

use crate::{each_store, run};

#[test]
fn a_held_run_cannot_be_taken_twice() {
    each_store(|fx| {
        let store = &fx.store;
        let a = run(store, 1);
        assert!(!store.is_held(a));
        let lock = store.lock_run(a).expect("first holder");
        assert!(store.is_held(a));
        let err = store.lock_run(a).expect_err("second holder").to_string();
        let want = if store.is_shared() {
            format!("run {a} is held by cordon pid {}", std::process::id())
        } else {
            "is held by another cordon process".to_owned()
        };
        assert!(err.contains(&want), "{}: {err}", fx.backend);
        drop(lock);
        assert!(!store.is_held(a), "{}", fx.backend);
        assert!(
            store.lock_run(a).is_ok(),
            "{}: released on drop",
            fx.backend
        );
    });
}

#[test]
fn one_run_per_workspace() {
    let (dir, store) = crate::store();
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
