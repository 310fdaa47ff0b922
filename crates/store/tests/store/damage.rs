//! Damaged state: a truncated or overwritten database, or one from a newer cordon, is named with
//! a fix — never a panic, never silently replaced.

use cordon_protocol::Event;
use cordon_store::{StateDir, Store};

use crate::run;

fn filled() -> (tempfile::TempDir, std::path::PathBuf) {
    let (dir, store) = crate::store();
    let a = run(&store, 1);
    for i in 0..200 {
        store
            .append(
                a,
                None,
                &Event::Error {
                    message: format!("event {i} {}", "x".repeat(200)),
                },
            )
            .expect("append");
    }
    drop(store);
    let db = dir.path().join("state/cordon.db");
    (dir, db)
}

fn open_error(dir: &tempfile::TempDir) -> String {
    match Store::open(&StateDir::new(dir.path().join("state"))) {
        Ok(_) => "opened".to_owned(),
        Err(err) => err.to_string(),
    }
}

#[test]
fn a_truncated_database_is_named_with_the_fix() {
    let (dir, db) = filled();
    let len = std::fs::metadata(&db).expect("meta").len();
    assert!(
        len > 16 * 1024,
        "the database spans several pages ({len} bytes)"
    );
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .expect("open");
    file.set_len(len / 2).expect("truncate");
    let message = open_error(&dir);
    assert!(
        message.starts_with(&format!("the state database `{}` is damaged", db.display())),
        "{message}"
    );
    assert!(message.contains("move it aside"), "{message}");
}

#[test]
fn an_overwritten_database_is_named_with_the_fix() {
    let (dir, db) = filled();
    std::fs::write(&db, vec![0x5a; 8192]).expect("overwrite");
    let message = open_error(&dir);
    assert!(
        message.starts_with(&format!("the state database `{}` is damaged", db.display())),
        "{message}"
    );
}

#[test]
fn a_database_from_a_newer_cordon_is_refused() {
    let (dir, db) = filled();
    let conn = rusqlite::Connection::open(&db).expect("open");
    conn.pragma_update(None, "user_version", 99).expect("bump");
    drop(conn);
    let message = open_error(&dir);
    assert!(
        message.contains("was written by a newer cordon (schema 99"),
        "{message}"
    );
}

#[test]
fn an_intact_database_opens_as_the_control() {
    let (dir, _db) = filled();
    assert_eq!(open_error(&dir), "opened");
}
