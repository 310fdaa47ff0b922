//! Appending and reading events: contiguous sequences, append-only, blobs, stamps, prefixes.

use cordon_protocol::event::OutputStream;
use cordon_protocol::{Attempt, Event, StepName};

use crate::{each_store, run};

fn started() -> Event {
    Event::StepStarted {
        attempt: Attempt::FIRST,
    }
}

#[test]
fn two_connections_appending_to_one_run_at_once_keep_its_sequence_contiguous() {
    each_store(|fx| {
        let store = &fx.store;
        let id = run(store, 1);
        let step = StepName::parse("test").ok();
        let others: Vec<_> = (0..2).map(|_| store.connect().expect("connect")).collect();
        std::thread::scope(|scope| {
            for other in others {
                let step = step.clone();
                scope.spawn(move || {
                    for _ in 0..100 {
                        other.append(id, step.as_ref(), &started()).expect("append");
                    }
                });
            }
        });
        let seqs = crate::seqs(store, id);
        assert_eq!(seqs, (1..=200).collect::<Vec<u64>>());
    });
}

#[test]
fn sequences_are_contiguous_per_run_from_one() {
    each_store(|fx| {
        let store = &fx.store;
        let (a, b) = (run(store, 1), run(store, 2));
        let step = StepName::parse("test").ok();
        for _ in 0..3 {
            store
                .append(a, step.as_ref(), &started())
                .expect("append a");
        }
        store
            .append(
                b,
                None,
                &Event::Error {
                    message: "x".into(),
                },
            )
            .expect("append b");
        let seqs = crate::seqs(store, a);
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(store.events(b).expect("events")[0].seq, 1);
        assert_eq!(store.events_after(a, 2).expect("after").len(), 1);
        assert_eq!(store.events(a).expect("events")[0].step, step);
    });
}

#[test]
fn the_schema_refuses_gaps_updates_and_deletes() {
    each_store(|fx| {
        let store = &fx.store;
        let a = run(store, 1);
        store.append(a, None, &started()).expect("append");
        let id = a.to_string();
        let insert = |seq: u64, data: &str| {
            fx.sql(&format!(
                "INSERT INTO events (run, seq, ts, type, step, data) VALUES ('{id}', {seq}, 0, 'error', NULL, '{data}')"
            ))
        };
        assert!(
            insert(3, "{}").is_err(),
            "{}: a gap in the sequence is refused",
            fx.backend
        );
        let update = fx.sql(&format!("UPDATE events SET ts = 1 WHERE run = '{id}'"));
        assert!(update.is_err(), "{}: events cannot be updated", fx.backend);
        let delete = fx.sql(&format!("DELETE FROM events WHERE run = '{id}'"));
        assert!(delete.is_err(), "{}: events cannot be deleted", fx.backend);
        let next = insert(2, r#"{"message":"m"}"#);
        assert_eq!(next.ok(), Some(1), "the next number is accepted (control)");
    });
}

#[test]
fn events_blobs_and_stamps_survive_reopening() {
    each_store(|fx| {
        let store = &fx.store;
        let a = run(store, 1);
        // A NUL and an escape sequence are bytes like any other.
        let output = Event::StepOutput {
            stream: OutputStream::Stdout,
            text: "hi\0 \u{1b}[2J\n".into(),
        };
        store.append(a, None, &output).expect("append");
        let blob = store.put_blob(a, b"diff --git").expect("blob");
        store.put_stamp("abc").expect("stamp");
        let store = cordon_store::Store::open(&fx.state).expect("reopen");
        assert_eq!(store.events(a).expect("events")[0].event, output);
        assert_eq!(
            store.blob(blob).expect("blob").as_deref(),
            Some(&b"diff --git"[..])
        );
        assert!(store.has_stamp("abc").expect("stamp"));
        assert!(!store.has_stamp("abd").expect("stamp"));
    });
}

#[test]
fn runs_are_found_by_unique_prefix() {
    each_store(|fx| {
        let store = &fx.store;
        let a = run(store, 1 << 100);
        let b = run(store, (1 << 100) + 1);
        let text = a.to_string();
        assert_eq!(store.find_run(&text).expect("full id"), a);
        assert_eq!(store.find_run(&text.to_uppercase()).expect("upper case"), a);
        let common = &text[..20];
        assert_eq!(
            store
                .find_run(common)
                .map_err(|e| e.to_string())
                .err()
                .as_deref(),
            Some(
                format!(
                    "`{common}` matches 2 runs; give more characters of the id (see `cordon runs`)"
                )
                .as_str()
            )
        );
        assert_eq!(
            store
                .find_run("zz")
                .map_err(|e| e.to_string())
                .err()
                .as_deref(),
            Some("no run matches `zz`; list the runs with `cordon runs`")
        );
        assert_eq!(store.last_run().expect("last"), Some(b));
    });
}
