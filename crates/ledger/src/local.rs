//! The local store: the journal files of one directory (the runner's state
//! dir, or the directory a lease names with `--ledger PATH`). Uses are
//! counted per directory: runners that do not share it do not share counts.

use std::path::{Path, PathBuf};

use crate::journal::{self, AttemptLock, Committed, Event, Journal, JournalError, Summary};

use governed_sys::wait::WaitEnd;

use super::{AttemptHold, BrokenChain, Chain, GoalSession, Ledger, LedgerError};

pub struct LocalLedger {
    dir: PathBuf,
    named: bool,
}

impl LocalLedger {
    /// The runner's state dir (no `--ledger`).
    pub fn state_dir(dir: &Path) -> LocalLedger {
        LocalLedger {
            dir: dir.to_path_buf(),
            named: false,
        }
    }

    /// A directory a lease names.
    pub fn named(dir: &Path) -> LocalLedger {
        LocalLedger {
            dir: dir.to_path_buf(),
            named: true,
        }
    }
}

impl LocalLedger {
    /// A named ledger is created by `approve` (with its `journal/`), never
    /// by `run`: a deleted ledger, or an empty mount point where the
    /// ledger's file system is not mounted, is unreachable. Re-creating it
    /// would forget every use spent and every revocation recorded there.
    fn require_approved_dir(&self) -> Result<(), LedgerError> {
        if !self.named {
            return Ok(());
        }
        let j = self.dir.join("journal");
        match std::fs::symlink_metadata(&j) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(LedgerError::Unavailable(format!(
                "ledger {}: {} is not a directory",
                self.dir.display(),
                j.display()
            ))),
            Err(e) => Err(self.journal_unreachable(&j, &e)),
        }
    }
}

impl LocalLedger {
    /// Why a named ledger's `journal/` cannot be reached: a permission
    /// (with the owner, mode and uid to fix), or gone (never re-created).
    fn journal_unreachable(&self, j: &Path, e: &std::io::Error) -> LedgerError {
        LedgerError::Unavailable(if e.kind() == std::io::ErrorKind::PermissionDenied {
            format!(
                "ledger {}: {}: {e}{}",
                self.dir.display(),
                j.display(),
                governed_sys::safe_io::permission_hint(j, e)
            )
        } else {
            format!(
                "ledger {}: {}: {e}; a ledger is created by approve, never re-created by run (is its file system mounted?)",
                self.dir.display(),
                j.display()
            )
        })
    }
}

fn err(e: JournalError) -> LedgerError {
    match e {
        JournalError::Corrupt { .. } => LedgerError::Corrupt(e.to_string()),
        JournalError::Unavailable { .. } => LedgerError::Unavailable(e.to_string()),
        JournalError::LockWait {
            end: WaitEnd::Cancelled(sig),
            ..
        } => LedgerError::Cancelled(sig),
        JournalError::LockWait { .. } => LedgerError::Unavailable(e.to_string()),
    }
}

impl Ledger for LocalLedger {
    fn protected_paths(&self) -> (Option<PathBuf>, Vec<PathBuf>) {
        (self.named.then(|| self.dir.clone()), Vec::new())
    }

    fn name(&self) -> String {
        if self.named {
            self.dir.display().to_string()
        } else {
            format!("state dir {}", self.dir.display())
        }
    }

    fn is_named(&self) -> bool {
        self.named
    }

    fn open_goal(&self, goal_id: &str) -> Result<Box<dyn GoalSession>, LedgerError> {
        self.require_approved_dir()?;
        let journal = Journal::open(&self.dir, goal_id).map_err(err)?;
        Ok(Box::new(LocalGoal {
            journal,
            dir: self.dir.clone(),
            goal_id: goal_id.to_string(),
        }))
    }

    fn reachable(&self) -> Result<(), LedgerError> {
        if !self.dir.is_dir() {
            let what = if self.named { "ledger" } else { "state dir" };
            return Err(LedgerError::Unavailable(format!(
                "{what} {}: no such directory",
                self.dir.display()
            )));
        }
        self.require_approved_dir()
    }

    fn chains(&self) -> Result<Vec<Chain>, LedgerError> {
        self.require_approved_dir()?;
        Ok(journal::read_all(&self.dir)
            .map_err(err)?
            .into_iter()
            .map(|(path, r)| {
                (
                    path.display().to_string(),
                    r.map_err(|e| BrokenChain(e.to_string())),
                )
            })
            .collect())
    }

    fn chain_of(&self, goal_id: &str) -> Result<Vec<crate::journal::Entry>, LedgerError> {
        self.require_approved_dir()?;
        journal::read_goal(&self.dir, goal_id).map_err(err)
    }

    fn attempt_is_live(&self, attempt_id: &str) -> bool {
        journal::attempt_is_live(&self.dir, attempt_id)
    }

    fn local_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }
}

struct LocalGoal {
    journal: Journal,
    dir: PathBuf,
    goal_id: String,
}

impl GoalSession for LocalGoal {
    fn summary(&self) -> &Summary {
        self.journal.summary()
    }

    fn is_live(&self, attempt_id: &str) -> bool {
        journal::attempt_is_live(&self.dir, attempt_id)
    }

    fn append(&mut self, event: Event) -> Result<String, LedgerError> {
        self.journal.append(event).map_err(err)
    }

    fn commit(self: Box<Self>) -> Result<(), LedgerError> {
        Ok(())
    }

    fn spend(
        self: Box<Self>,
        attempt_id: &str,
        executing: Event,
    ) -> Result<(Committed, Box<dyn AttemptHold>), LedgerError> {
        let LocalGoal {
            journal,
            dir,
            goal_id,
        } = *self;
        // The witness first: a reader that sees the record sees it held.
        let lock = AttemptLock::acquire(&dir, attempt_id).map_err(err)?;
        // Written under the Goal's lock, flushed once it is released.
        let committed = journal.commit_executing(executing).map_err(err)?;
        Ok((
            committed,
            Box::new(LocalAttempt {
                dir,
                goal_id,
                lock: Some(lock),
            }),
        ))
    }
}

struct LocalAttempt {
    dir: PathBuf,
    goal_id: String,
    lock: Option<AttemptLock>,
}

impl AttemptHold for LocalAttempt {
    fn record_result(&mut self, result: Event) -> Result<String, LedgerError> {
        Journal::open(&self.dir, &self.goal_id)
            .and_then(|j| j.append_then_unlock(result))
            .map_err(err)
    }

    fn release(mut self: Box<Self>) {
        if let Some(l) = self.lock.take() {
            l.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A named ledger is used only where `approve` made it: its `journal`
    /// must be a real directory, never a file or a symlink (which could
    /// carry the records elsewhere), and it is never re-created by `run`.
    #[test]
    fn a_named_ledger_needs_its_journal_directory_itself() {
        let d = tempfile::tempdir().unwrap();
        let ledger = LocalLedger::named(d.path());
        let refused = |l: &LocalLedger| match l.open_goal("g") {
            Err(LedgerError::Unavailable(m)) => m,
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("opened"),
        };
        assert!(
            refused(&ledger).contains("a ledger is created by approve, never re-created by run")
        );
        assert!(!d.path().join("journal").exists());
        std::fs::write(d.path().join("journal"), b"").unwrap();
        assert!(refused(&ledger).ends_with("journal is not a directory"));
        std::fs::remove_file(d.path().join("journal")).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), d.path().join("journal")).unwrap();
        assert!(refused(&ledger).ends_with("journal is not a directory"));
        std::fs::remove_file(d.path().join("journal")).unwrap();
        std::fs::create_dir(d.path().join("journal")).unwrap();
        assert!(ledger.open_goal("g").is_ok());
        // Not there for want of permission: not said to be gone.
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let LedgerError::Unavailable(m) = ledger.journal_unreachable(Path::new("/j"), &denied)
        else {
            panic!("not unavailable");
        };
        assert!(
            m.starts_with(&format!(
                "ledger {}: /j: permission denied",
                d.path().display()
            )),
            "{m}"
        );
        assert!(!m.contains("never re-created"), "{m}");
        // The state dir is the runner's own: made when missing.
        let state = d.path().join("state");
        assert!(LocalLedger::state_dir(&state).open_goal("g").is_ok());
    }

    /// What the child must not reach of a local store: a named ledger's
    /// directory (the state dir is protected as the state dir already); a
    /// local store has no credential files.
    #[test]
    fn a_named_ledger_protects_its_directory_and_a_state_dir_nothing_more() {
        let p = Path::new("/srv/ledger");
        assert_eq!(
            LocalLedger::named(p).protected_paths(),
            (Some(p.to_path_buf()), vec![])
        );
        assert_eq!(LocalLedger::state_dir(p).protected_paths(), (None, vec![]));
    }

    #[test]
    fn a_named_ledger_says_so_and_both_kinds_are_local_directories() {
        let p = Path::new("/srv/ledger");
        assert!(LocalLedger::named(p).is_named());
        assert!(!LocalLedger::state_dir(p).is_named());
        assert_eq!(LocalLedger::named(p).local_dir(), Some(p));
        assert_eq!(LocalLedger::state_dir(p).local_dir(), Some(p));
    }

    /// A spent attempt is held (live to any reader) until its runner
    /// releases it; released, it leaves no lock file behind (only a
    /// crashed runner's stays, which is what makes its outcome unknown).
    #[test]
    fn a_spent_attempt_is_live_until_released_and_leaves_nothing_behind() {
        let d = tempfile::tempdir().unwrap();
        let ledger = LocalLedger::state_dir(d.path());
        let session = ledger.open_goal("g").unwrap();
        let executing = crate::journal::tests::executing("g", "a1", "l", 1);
        let (_committed, mut hold) = session.spend("a1", executing).unwrap();
        assert!(ledger.attempt_is_live("a1"));
        let lock_file = d.path().join("attempts").join("a1.lock");
        assert!(lock_file.exists());
        hold.record_result(Event::Result {
            attempt_id: "a1".into(),
            outcome: governed_model::OutcomeClass::Exited,
            reason: None,
            exit_code: Some(0),
            signal: None,
            cleanup: governed_model::CleanupState::Gone,
            receipt_sha256: "r".into(),
        })
        .unwrap();
        hold.release();
        assert!(!ledger.attempt_is_live("a1"));
        assert!(!lock_file.exists());
        let session = ledger.open_goal("g").unwrap();
        assert!(crate::open_attempts(&*session).is_empty());
    }
}
