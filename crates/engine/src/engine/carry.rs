//! A batch run's workspace, recorded for a resume on another machine (DESIGN §16, §18): after
//! `run.started` and every `step.finished`, the work tree as a git tree with the objects beyond
//! the run's origin (`cordon_git::Repo::carry`), stored as a blob and keyed in the store by that
//! event's seq. A resume on a machine without the workspace rebuilds it from the latest record,
//! and only when that record is of the log's last step (`cordon batch work`).
//!
//! A record that cannot be taken (a work tree past `cordon_git::MAX_CARRIED`) is an `error`
//! event, not the run's end: the run goes on here, and a resume elsewhere is refused because the
//! latest record is then older than the last step.

use cordon_git::{Carried, ObjectId};
use cordon_protocol::event::{BlobId, Event};

use super::{Engine, Failure};

/// What a batch run's engine knows of its records.
pub(crate) struct Carry {
    /// The commit the run's clone was made from (the origin every record is taken against).
    origin: ObjectId,
    /// The last record's bytes' digest and blob, reused when a step changed nothing.
    last: Option<([u8; 32], BlobId)>,
}

impl Engine<'_> {
    /// Records this run's workspace after `run.started` and every `step.finished` (a batch
    /// run's engine; see the module). The origin is the latest record's, else HEAD's parent: at
    /// a batch run's start HEAD is the tooling commit on the clone's origin.
    pub fn record_workspace_for_resume(&mut self) -> Result<(), crate::EngineError> {
        let Some(git) = self.cx.workspace.git() else {
            return Ok(());
        };
        let origin = match self.cx.store.workspace_tree(self.cx.run)? {
            Some((_, blob)) => {
                let bytes = self.cx.store.blob(blob)?.unwrap_or_default();
                Carried::decode(&bytes).map(|c| c.origin)
            }
            None => git.head_parent(),
        };
        self.carry = Some(
            origin
                .map(|origin| Carry { origin, last: None })
                .map_err(|err| crate::error_chain(&err)),
        );
        Ok(())
    }

    /// Takes and stores the record of the event `seq` (when this run records them).
    pub(super) fn record_workspace(&mut self, seq: u64) -> Result<(), Failure> {
        let (Some(carry), Some(git)) = (&self.carry, self.cx.workspace.git()) else {
            return Ok(());
        };
        // This machine's note that its clone reached the boundary `seq`, whether or not the
        // record below is taken: a resume here keeps the clone only when the log's last
        // boundary is the one noted (else the run went on elsewhere, and the clone is rebuilt
        // from the store's record, or refused when that record is older than the log).
        let _ = crate::run::note_boundary(self.cx.store.dir(), self.cx.run, seq);
        let carry = match carry {
            Ok(carry) => carry,
            Err(why) => {
                let message = format!(
                    "the workspace cannot be recorded for a resume on another machine (a resume \
                     there is refused): {why}"
                );
                self.carry = None;
                self.append(None, Event::Error { message })?;
                return Ok(());
            }
        };
        let carried = git.carry(
            self.cx.workspace.view(),
            carry.origin,
            &self.cx.tooling,
            &mut self.cache,
        );
        let bytes = match carried {
            Ok(carried) => carried.encode(),
            Err(err) => {
                self.append(
                    None,
                    Event::Error {
                        message: format!(
                            "{} (a resume there is refused until a later step's is): {}",
                            crate::run::CARRY_REFUSED,
                            crate::error_chain(&err)
                        ),
                    },
                )?;
                return Ok(());
            }
        };
        let digest: [u8; 32] = sha2::Sha256::digest(&bytes).into();
        let blob = match carry.last {
            Some((last, blob)) if last == digest => blob,
            _ => self.cx.store.put_blob(self.cx.run, &bytes)?,
        };
        self.cx.store.put_workspace_tree(self.cx.run, seq, blob)?;
        if let Some(Ok(carry)) = &mut self.carry {
            carry.last = Some((digest, blob));
        }
        Ok(())
    }
}

use sha2::Digest as _;
