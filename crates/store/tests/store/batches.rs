//! Batches and their tasks, on every backend.

use cordon_protocol::RunId;
use cordon_protocol::event::Timestamp;
use cordon_store::{BatchRow, StoreError, TaskRow};

use crate::each_store;

fn batch(id: u128) -> BatchRow {
    BatchRow {
        id: RunId::from_u128(id),
        created: Timestamp(u64::try_from(id).unwrap_or(0)),
        pipeline: "ci/pipeline.yaml".to_owned(),
        pipeline_file: "pipeline.yaml".to_owned(),
        tooling: b"{\"files\":{}}\0bytes".to_vec(),
        backend: "local".to_owned(),
    }
}

fn task(index: u32, id: &str) -> TaskRow {
    TaskRow {
        index,
        id: id.to_owned(),
        repo: "https://forge.example.com/a/b.git".to_owned(),
        git_ref: index.is_multiple_of(2).then(|| "main".to_owned()),
        prompt: (!index.is_multiple_of(2)).then(|| "Fix issue {vars.n}".to_owned()),
        vars: vec![
            ("zeta".to_owned(), "1".to_owned()),
            ("alpha".to_owned(), "two words".to_owned()),
        ],
        run: None,
    }
}

#[test]
fn a_batch_and_its_tasks_read_back_as_written_in_file_order() {
    each_store(|fx| {
        let b = batch(7);
        let tasks = [task(0, "one"), task(1, "two"), task(2, "three")];
        fx.store.create_batch(&b, &tasks).expect("create");
        assert_eq!(
            fx.store.batch(b.id).expect("read"),
            Some(b.clone()),
            "{}",
            fx.backend
        );
        assert_eq!(
            fx.store.batch_tasks(b.id).expect("tasks"),
            tasks.to_vec(),
            "{}",
            fx.backend
        );
        assert_eq!(fx.store.batch(RunId::from_u128(8)).expect("read"), None);
        assert_eq!(fx.store.batch_ids().expect("ids"), vec![b.id]);
    });
}

#[test]
fn a_batch_whose_tasks_cannot_all_be_written_leaves_nothing_behind() {
    each_store(|fx| {
        let b = batch(9);
        let duplicate = [task(0, "same"), task(1, "same")];
        assert!(
            fx.store.create_batch(&b, &duplicate).is_err(),
            "{}",
            fx.backend
        );
        assert_eq!(fx.store.batch(b.id).expect("read"), None, "{}", fx.backend);
        assert!(fx.store.batch_tasks(b.id).expect("tasks").is_empty());
        // The store is still usable afterwards (a failed transaction was ended).
        fx.store
            .create_batch(&b, &[task(0, "same")])
            .expect("then it can be written");
    });
}

#[test]
fn a_task_gets_one_run_and_a_second_worker_is_refused() {
    each_store(|fx| {
        let b = batch(11);
        fx.store
            .create_batch(&b, &[task(0, "one"), task(1, "two")])
            .expect("create");
        let (first, second) = (RunId::from_u128(100), RunId::from_u128(200));
        fx.store
            .set_task_run(b.id, 0, None, first)
            .expect("first worker");
        // The same worker recording the same run again is fine (a retried call).
        fx.store.set_task_run(b.id, 0, None, first).expect("again");
        let refused = fx.store.set_task_run(b.id, 0, None, second);
        assert!(
            matches!(&refused, Err(StoreError::TaskTaken { run, .. }) if *run == first.to_string()),
            "{}: {refused:?}",
            fx.backend
        );
        // A worker that saw `first` never created may replace it.
        fx.store
            .set_task_run(b.id, 0, Some(first), second)
            .expect("replaced");
        let (found_batch, found) = fx
            .store
            .task_of_run(second)
            .expect("lookup")
            .expect("found");
        assert_eq!(
            (found_batch, found.id.as_str(), found.run),
            (b.id, "one", Some(second))
        );
        assert_eq!(fx.store.task_of_run(first).expect("lookup"), None);
        // One run belongs to at most one task.
        assert!(
            fx.store.set_task_run(b.id, 1, None, second).is_err(),
            "{}",
            fx.backend
        );
    });
}

#[test]
fn a_batch_is_found_by_a_unique_prefix_of_its_id() {
    each_store(|fx| {
        let one = batch(0x0123_0000_0000_0000_0000_0000_0000_0001);
        let two = batch(0x0123_0000_0000_0000_0000_0000_0000_0002);
        fx.store.create_batch(&one, &[]).expect("one");
        fx.store.create_batch(&two, &[]).expect("two");
        let full = one.id.to_string();
        assert_eq!(
            fx.store.find_batch(&full.to_ascii_lowercase()).ok(),
            Some(one.id)
        );
        let shared = &full[..4];
        assert_eq!(
            fx.store.find_batch(shared).map_err(|e| e.to_string()),
            Err(format!(
                "`{shared}` matches 2 batches; give more characters of the id"
            ))
        );
        assert_eq!(
            fx.store.find_batch("zz").map_err(|e| e.to_string()),
            Err(
                "no batch matches `zz`; its id is the `batch ID` line `cordon batch` printed first"
                    .to_owned()
            )
        );
    });
}

#[test]
fn one_worker_of_this_machine_holds_a_task_at_a_time() {
    let (_dir, store) = crate::store();
    let b = RunId::from_u128(5);
    let held = store.lock_batch_task(b, 0).expect("lock");
    assert!(held.is_some());
    assert!(
        store.lock_batch_task(b, 0).expect("lock").is_none(),
        "a second worker"
    );
    assert!(
        store.lock_batch_task(b, 1).expect("lock").is_some(),
        "another task"
    );
    drop(held);
    assert!(
        store.lock_batch_task(b, 0).expect("lock").is_some(),
        "released"
    );
}

#[test]
fn a_runs_latest_workspace_record_is_the_one_of_its_last_step_and_a_repeat_is_ignored() {
    each_store(|fx| {
        let run = crate::run(&fx.store, 7);
        assert_eq!(fx.store.workspace_tree(run).expect("none yet"), None);
        let first = fx.store.put_blob(run, b"first").expect("blob");
        let later = fx.store.put_blob(run, b"later").expect("blob");
        fx.store.put_workspace_tree(run, 4, first).expect("record");
        fx.store.put_workspace_tree(run, 9, later).expect("record");
        // A repeat of seq 9 (a retried call) keeps the first record of it.
        fx.store.put_workspace_tree(run, 9, first).expect("repeat");
        assert_eq!(
            fx.store.workspace_tree(run).expect("read"),
            Some((9, later)),
            "{}",
            fx.backend
        );
        let other = crate::run(&fx.store, 8);
        assert_eq!(fx.store.workspace_tree(other).expect("read"), None);
        // Only the latest record is kept: the earlier one's blob is gone, a blob the latest
        // shares stays, and a stale record of an earlier seq is dropped at once.
        assert_eq!(fx.store.blob(first).expect("read"), None, "{}", fx.backend);
        fx.store
            .put_workspace_tree(run, 12, later)
            .expect("same blob");
        assert_eq!(
            fx.store.blob(later).expect("read").as_deref(),
            Some(&b"later"[..])
        );
        let stale = fx.store.put_blob(run, b"stale").expect("blob");
        fx.store.put_workspace_tree(run, 10, stale).expect("stale");
        assert_eq!(
            fx.store.workspace_tree(run).expect("read"),
            Some((12, later))
        );
        assert_eq!(fx.store.blob(stale).expect("read"), None, "{}", fx.backend);
    });
}
