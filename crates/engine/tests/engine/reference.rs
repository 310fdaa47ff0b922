//! The event JSON of a reference run, snapshotted with times redacted (the run id is fixed by
//! the harness).

use cordon_protocol::Event;
use cordon_protocol::event::Timestamp;

use crate::crash::{REFERENCE, scripted};
use crate::harness::Harness;

#[test]
fn reference_run_event_json() {
    let mut h = Harness::new(REFERENCE);
    scripted(&mut h);
    h.run_to_end(3);
    let lines: Vec<String> = h
        .records()
        .into_iter()
        .map(|mut record| {
            record.ts = Timestamp(0);
            match &mut record.event {
                Event::RunStarted { workspace, .. } => *workspace = "[workspace]".to_owned(),
                Event::SandboxExec { duration_ms, .. } => *duration_ms = 0,
                Event::SetupRan {
                    duration_ms, stamp, ..
                } => {
                    *duration_ms = 0;
                    *stamp = "[stamp]".to_owned();
                }
                _ => {}
            }
            record.to_json_line()
        })
        .collect();
    insta::assert_snapshot!(lines.join("\n"));
}
