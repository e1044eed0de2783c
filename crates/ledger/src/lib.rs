//! The ledger: where a lease's uses are spent, its revocations live and an
//! unknown outcome blocks its Goal (CONTRACT §6.7).
//!
//! One interface, two stores:
//!
//! ```text
//!                     ┌────────────── Ledger ──────────────┐
//!  run / journal /    │ open_goal → GoalSession             │
//!  resolve / revoke ─▶│   summary, is_live, append, commit, │
//!  / verify           │   spend → AttemptHold (result)      │
//!                     │ chains, attempts                    │
//!                     └───────┬──────────────────┬─────────┘
//!                        LocalLedger          PgLedger
//!                 (state dir or --ledger DIR)  (--ledger postgres://HOST/DB)
//! ```
//!
//! Both keep the same records (`journal::Record`, hash-chained per Goal) and
//! fold them the same way (`journal::Summary`). A Goal's records are locked
//! for the read-check-append of admission (flock on the journal file; a row
//! lock on the Goal's head row), and a live runner holds a liveness witness
//! for the attempt's lifetime (flock on the attempt's lock file; a session
//! advisory lock), which a dead runner's kernel or server releases: an open
//! attempt whose witness is free is `unknown` for every reader.

#![forbid(unsafe_code)]

pub mod journal;
mod local;
pub mod pending;
pub mod pg;

use std::path::{Path, PathBuf};

use crate::journal::{
    AttemptState, AttemptSummary, Classification, Committed, Entry, Event, Summary,
};

pub use local::LocalLedger;
#[cfg(feature = "postgres")]
pub use pg::PgLedger;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Cannot be reached, read or written: nothing may be spent.
    #[error("{0}")]
    Unavailable(String),
    /// A record or chain that does not check out: fail closed.
    #[error("{0}")]
    Corrupt(String),
    /// A cancelling signal (its number) arrived while waiting for the
    /// Goal's lock: nothing was spent.
    #[error("a cancelling signal arrived while waiting for the Goal's lock")]
    Cancelled(i32),
}

/// One Goal's chain: a label, and its records or what breaks it.
pub type Chain = (String, Result<Vec<Entry>, BrokenChain>);

/// What breaks one Goal's chain, in the ledger's own words (a journal's
/// parse or read error, a PostgreSQL chain's check). A caller that needs
/// every record counts it as corrupt ([`all_entries`]); `journal verify`
/// and `doctor --ledger` print it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BrokenChain(pub String);

impl From<BrokenChain> for LedgerError {
    fn from(b: BrokenChain) -> LedgerError {
        LedgerError::Corrupt(b.0)
    }
}

/// Why a `--ledger` (or a lease's `ledger`) names no ledger this binary
/// can use: `invalid_input` in `run`, a usage error elsewhere.
#[derive(Debug, thiserror::Error)]
pub enum LedgerSpecError {
    #[error(transparent)]
    Address(#[from] pg::AddressError),
    #[error("--ledger: empty path")]
    EmptyPath,
    #[error("--ledger {0:?}: a ledger is a directory or postgres://HOST[:PORT]/DB")]
    Unknown(String),
    #[error("--ledger {path}: {source}")]
    Path {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--ledger: {0}")]
    Journal(#[source] crate::journal::JournalError),
}

/// Where a ledger lives, as `--ledger` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerSpec {
    Path(PathBuf),
    Postgres(pg::PgTarget),
}

impl LedgerSpec {
    /// Parse `--ledger PATH|postgres://HOST[:PORT]/DB`. A PostgreSQL address
    /// carries no credentials and no options: those come from the libpq
    /// environment only.
    pub fn parse(s: &str) -> Result<LedgerSpec, LedgerSpecError> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(LedgerSpec::Postgres(pg::PgTarget::parse(s)?));
        }
        if s.is_empty() || s.contains('\0') {
            return Err(LedgerSpecError::EmptyPath);
        }
        if s.contains("://") {
            return Err(LedgerSpecError::Unknown(s.to_string()));
        }
        Ok(LedgerSpec::Path(PathBuf::from(s)))
    }

    /// The string `for_lease` would record, creating nothing: an existing
    /// directory canonical, a missing one made absolute (what `approve
    /// --file --check` compares; it writes nothing).
    pub fn lease_name(&self) -> Result<String, LedgerSpecError> {
        match self {
            LedgerSpec::Path(p) => std::fs::canonicalize(p)
                .or_else(|_| std::path::absolute(p))
                .map(|c| c.display().to_string())
                .map_err(|source| LedgerSpecError::Path {
                    path: p.display().to_string(),
                    source,
                }),
            LedgerSpec::Postgres(t) => Ok(t.to_string()),
        }
    }

    /// The string a lease records: an absolute directory (created here if
    /// missing, with its `journal/`, which `run` requires) or the
    /// normalised PostgreSQL address.
    pub fn for_lease(&self) -> Result<String, LedgerSpecError> {
        match self {
            LedgerSpec::Path(p) => {
                crate::journal::ensure_dir(&p.join("journal")).map_err(LedgerSpecError::Journal)?;
                std::fs::canonicalize(p)
                    .map(|c| c.display().to_string())
                    .map_err(|source| LedgerSpecError::Path {
                        path: p.display().to_string(),
                        source,
                    })
            }
            LedgerSpec::Postgres(t) => Ok(t.to_string()),
        }
    }

    pub fn open(&self) -> Box<dyn Ledger> {
        match self {
            LedgerSpec::Path(p) => Box::new(LocalLedger::named(p)),
            #[cfg(feature = "postgres")]
            LedgerSpec::Postgres(t) => Box::new(PgLedger::new(t.clone())),
            #[cfg(not(feature = "postgres"))]
            LedgerSpec::Postgres(t) => Box::new(NoPostgres(t.clone())),
        }
    }
}

/// A `postgres://` ledger in a build without the PostgreSQL store: named
/// like the real one, and every use of it `Unavailable` (so `run` refuses
/// `ledger_unavailable`, zero spawn), saying which build would serve it.
#[cfg(not(feature = "postgres"))]
struct NoPostgres(pg::PgTarget);

#[cfg(not(feature = "postgres"))]
impl NoPostgres {
    fn unavailable(&self) -> LedgerError {
        LedgerError::Unavailable(format!(
            "ledger {}: this governed-exec was built without PostgreSQL support (cargo feature `postgres`); use a build with it",
            self.0
        ))
    }
}

#[cfg(not(feature = "postgres"))]
impl Ledger for NoPostgres {
    fn name(&self) -> String {
        self.0.to_string()
    }
    fn is_named(&self) -> bool {
        true
    }
    fn open_goal(&self, _goal_id: &str) -> Result<Box<dyn GoalSession>, LedgerError> {
        Err(self.unavailable())
    }
    fn chains(&self) -> Result<Vec<Chain>, LedgerError> {
        Err(self.unavailable())
    }
    fn chain_of(&self, _goal_id: &str) -> Result<Vec<Entry>, LedgerError> {
        Err(self.unavailable())
    }
    fn attempt_is_live(&self, _attempt_id: &str) -> bool {
        false
    }
    fn protected_paths(&self) -> (Option<PathBuf>, Vec<PathBuf>) {
        (None, pg::credential_files())
    }
    fn reachable(&self) -> Result<(), LedgerError> {
        Err(self.unavailable())
    }
}

/// The ledger given on the command line of `journal`, `resolve`, `verify`:
/// `--ledger` if given, else the state dir.
pub fn from_flags(
    ledger: Option<&str>,
    state_dir: Option<&Path>,
) -> Result<Box<dyn Ledger>, LedgerSpecError> {
    match ledger {
        Some(l) => Ok(LedgerSpec::parse(l)?.open()),
        None => Ok(Box::new(LocalLedger::state_dir(
            &state_dir
                .map(Path::to_path_buf)
                .unwrap_or_else(crate::journal::default_state_dir),
        ))),
    }
}

/// The ledger of a lease: the one it names, else the runner's state dir.
pub fn for_lease(
    named: Option<&str>,
    state_dir: &Path,
) -> Result<Box<dyn Ledger>, LedgerSpecError> {
    match named {
        Some(l) => Ok(LedgerSpec::parse(l)?.open()),
        None => Ok(Box::new(LocalLedger::state_dir(state_dir))),
    }
}

/// One store of records. Every method that can fail says whether the store
/// is unreachable (`Unavailable`) or its records do not check (`Corrupt`).
pub trait Ledger {
    /// How receipts and messages name this ledger (never a credential).
    fn name(&self) -> String;
    /// Whether the lease named it (`--ledger`), as opposed to the state dir.
    fn is_named(&self) -> bool;
    /// Lock one Goal's records and read its state (admission).
    fn open_goal(&self, goal_id: &str) -> Result<Box<dyn GoalSession>, LedgerError>;
    /// Every Goal's chain, checked: a label and its records, or the break.
    fn chains(&self) -> Result<Vec<Chain>, LedgerError>;
    /// One Goal's chain, checked, without its lock (a reader such as
    /// `verify`, whose cost must not grow with the other Goals): its
    /// records, none when the Goal has none; a break is `Corrupt`.
    fn chain_of(&self, goal_id: &str) -> Result<Vec<Entry>, LedgerError>;
    /// Whether a runner still holds this attempt (its liveness witness).
    fn attempt_is_live(&self, attempt_id: &str) -> bool;
    /// The files the runner's trust in this ledger rests on beyond its
    /// state dir, which the child must not reach: a named ledger directory,
    /// and the files its credentials come from (CONTRACT §7's reach).
    /// Required, not defaulted: a store that forgot its own would leave
    /// them in the child's reach unsaid.
    fn protected_paths(&self) -> (Option<PathBuf>, Vec<PathBuf>);
    /// The directory of a local store (its journal files and checkpoints).
    fn local_dir(&self) -> Option<&Path> {
        None
    }
    /// Whether the store is there to be read, before `journal` reads it: a
    /// missing directory is a typo or an unmounted file system, not an
    /// empty, sound journal. (A remote store answers when it is asked.)
    fn reachable(&self) -> Result<(), LedgerError> {
        Ok(())
    }
}

/// One Goal's records, locked until the session ends.
pub trait GoalSession {
    fn summary(&self) -> &Summary;
    fn is_live(&self, attempt_id: &str) -> bool;
    /// Append a record (durable once `commit` returns; at once for files).
    fn append(&mut self, event: Event) -> Result<String, LedgerError>;
    fn commit(self: Box<Self>) -> Result<(), LedgerError>;
    /// Spend one use: take the attempt's liveness witness, append the
    /// `executing` record and make it durable, release the Goal's lock.
    /// Returns the proof that the record is durable (what lets the child be
    /// spawned) and the held attempt.
    fn spend(
        self: Box<Self>,
        attempt_id: &str,
        executing: Event,
    ) -> Result<(Committed, Box<dyn AttemptHold>), LedgerError>;
}

/// A spent, running attempt: its witness is held until `release`.
pub trait AttemptHold {
    fn record_result(&mut self, result: Event) -> Result<String, LedgerError>;
    fn release(self: Box<Self>);
}

/// The attempts of a session's Goal with no result yet, with their state.
pub fn open_attempts(s: &dyn GoalSession) -> Vec<AttemptSummary> {
    crate::journal::open_attempts_with(s.summary(), &|id| s.is_live(id))
}

/// Every record of every Goal, failing on the first broken chain.
pub fn all_entries(l: &dyn Ledger) -> Result<Vec<Entry>, LedgerError> {
    let mut out = Vec::new();
    for (_, r) in l.chains()? {
        out.extend(r?);
    }
    Ok(out)
}

pub fn attempts(l: &dyn Ledger, entries: &[Entry]) -> Vec<AttemptSummary> {
    crate::journal::attempts_of_with(entries, &|id| l.attempt_is_live(id))
}

/// What an operator's command (`resolve`, `revoke`) can go wrong with: an
/// id it does not know, or a failure to carry it out.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("{0}")]
    UnknownId(String),
    #[error("{0}")]
    Failed(String),
}

/// A person's classification of an unknown attempt. Returns the lease id.
pub fn resolve(
    l: &dyn Ledger,
    attempt: &str,
    as_: Classification,
    by: &str,
    note: Option<String>,
) -> Result<String, OperatorError> {
    let failed = |e: LedgerError| OperatorError::Failed(e.to_string());
    let entries = all_entries(l).map_err(failed)?;
    let goal_id = entries
        .iter()
        .find_map(|e| match &e.record.event {
            Event::Executing {
                attempt_id, goal, ..
            } if attempt_id == attempt => Some(goal.id.clone()),
            _ => None,
        })
        .ok_or_else(|| {
            OperatorError::UnknownId(format!(
                "attempt {attempt:?} is not in the ledger {}",
                l.name()
            ))
        })?;
    let mut s = l.open_goal(&goal_id).map_err(failed)?;
    let summary = open_attempts(&*s)
        .into_iter()
        .find(|a| a.attempt_id == attempt)
        .ok_or_else(|| {
            OperatorError::UnknownId(format!(
                "attempt {attempt} already has a result or a resolution: there is nothing to resolve"
            ))
        })?;
    if summary.state != AttemptState::Unknown {
        return Err(OperatorError::UnknownId(format!(
            "attempt {attempt} is running, not unknown: there is nothing to resolve"
        )));
    }
    s.append(Event::Resolution {
        attempt_id: attempt.to_string(),
        classification: as_,
        by: by.to_string(),
        note,
    })
    .map_err(failed)?;
    if as_ == Classification::Stop {
        s.append(Event::Revocation {
            lease_id: summary.lease_id.clone(),
            by: by.to_string(),
        })
        .map_err(failed)?;
    }
    s.commit().map_err(failed)?;
    Ok(summary.lease_id)
}

/// Record a revocation of `lease_id` (of Goal `goal_id`) in the ledger.
pub fn revoke(l: &dyn Ledger, goal_id: &str, lease_id: &str, by: &str) -> Result<(), LedgerError> {
    let mut s = l.open_goal(goal_id)?;
    s.append(Event::Revocation {
        lease_id: lease_id.to_string(),
        by: by.to_string(),
    })?;
    s.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executing(goal: &str, attempt: &str) -> Event {
        journal::tests::executing(goal, attempt, &format!("lease-{goal}"), 1)
    }

    /// `resolve --attempt X` settles X, in the Goal whose executing record
    /// names X, and nothing else: with an unknown attempt in each of two
    /// Goals, each resolution lands on its own attempt whichever Goal's
    /// chain is read first.
    #[test]
    fn resolve_settles_the_named_attempt_and_no_other() {
        let d = tempfile::tempdir().unwrap();
        let l = LocalLedger::state_dir(d.path());
        for g in ["goal-a", "goal-b"] {
            let mut j = journal::Journal::open(d.path(), g).unwrap();
            j.append(executing(g, &format!("att-{g}"))).unwrap();
        }
        for g in ["goal-a", "goal-b"] {
            let other = if g == "goal-a" { "goal-b" } else { "goal-a" };
            let open_before = open_attempts(&*l.open_goal(other).unwrap()).len();
            let lease = resolve(&l, &format!("att-{g}"), Classification::Failed, "ops", None)
                .unwrap_or_else(|e| panic!("att-{g}: {e}"));
            assert_eq!(lease, format!("lease-{g}"));
            assert!(open_attempts(&*l.open_goal(g).unwrap()).is_empty());
            assert_eq!(
                open_attempts(&*l.open_goal(other).unwrap()).len(),
                open_before,
                "resolving att-{g} settled an attempt of {other}"
            );
        }
        match resolve(&l, "att-nope", Classification::Failed, "ops", None) {
            Err(OperatorError::UnknownId(m)) => assert!(m.contains("not in the ledger"), "{m}"),
            other => panic!("an unknown attempt: {other:?}"),
        }
    }

    /// Resolving as `stop` also revokes the attempt's lease (a person said
    /// "do not run this again"); `failed` and `succeeded` do not; `revoke`
    /// records the revocation in the Goal's chain.
    #[test]
    fn stop_revokes_the_lease_and_revoke_is_recorded() {
        let d = tempfile::tempdir().unwrap();
        let l = LocalLedger::state_dir(d.path());
        let mut j = journal::Journal::open(d.path(), "g").unwrap();
        j.append(executing("g", "att-1")).unwrap();
        j.append(executing("g", "att-2")).unwrap();
        drop(j);
        let revoked = |l: &LocalLedger| l.open_goal("g").unwrap().summary().revoked.clone();
        resolve(&l, "att-1", Classification::Failed, "ops", None).unwrap();
        assert!(revoked(&l).is_empty(), "failed revoked the lease");
        resolve(&l, "att-2", Classification::Stop, "ops", None).unwrap();
        assert_eq!(revoked(&l).into_iter().collect::<Vec<_>>(), ["lease-g"]);
        revoke(&l, "g", "lease-other", "ops").unwrap();
        assert!(revoked(&l).contains("lease-other"));
    }

    /// `journal list`'s attempts: every attempt of every Goal, an open one
    /// whose runner holds no lock reading `unknown`.
    #[test]
    fn attempts_lists_every_goals_attempts() {
        let d = tempfile::tempdir().unwrap();
        let l = LocalLedger::state_dir(d.path());
        for g in ["goal-a", "goal-b"] {
            let mut j = journal::Journal::open(d.path(), g).unwrap();
            j.append(executing(g, &format!("att-{g}"))).unwrap();
        }
        let entries = all_entries(&l).unwrap();
        let mut listed: Vec<(String, AttemptState)> = attempts(&l, &entries)
            .into_iter()
            .map(|a| (a.attempt_id, a.state))
            .collect();
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            listed,
            [
                ("att-goal-a".to_string(), AttemptState::Unknown),
                ("att-goal-b".to_string(), AttemptState::Unknown)
            ]
        );
    }

    /// What a lease records of `--ledger`: a directory canonical (made,
    /// with its `journal/`, by `for_lease`; only named by `lease_name`), a
    /// PostgreSQL address normalised; an empty path or a NUL is refused.
    #[test]
    fn a_lease_records_the_ledger_canonical() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().canonicalize().unwrap();
        let spec = LedgerSpec::parse(&format!("{}/./fleet", d.path().display())).unwrap();
        let want = real.join("fleet").display().to_string();
        assert_eq!(spec.lease_name().unwrap(), want, "named before it exists");
        assert!(
            !real.join("fleet").exists(),
            "lease_name created the directory"
        );
        assert_eq!(spec.for_lease().unwrap(), want);
        assert!(
            real.join("fleet/journal").is_dir(),
            "for_lease made journal/"
        );
        let pg = LedgerSpec::parse("postgresql://db.example/ledger").unwrap();
        assert_eq!(
            pg.lease_name().unwrap(),
            "postgres://db.example:5432/ledger"
        );
        assert_eq!(pg.for_lease().unwrap(), "postgres://db.example:5432/ledger");
        assert!(matches!(
            LedgerSpec::parse(""),
            Err(LedgerSpecError::EmptyPath)
        ));
        assert!(matches!(
            LedgerSpec::parse("a\0b"),
            Err(LedgerSpecError::EmptyPath)
        ));
        assert!(matches!(
            LedgerSpec::parse("/srv/ledger"),
            Ok(LedgerSpec::Path(_))
        ));
    }

    #[test]
    fn ledger_addresses_carry_no_credentials() {
        assert!(LedgerSpec::parse("postgres://u:secret@db/x").is_err());
        assert!(LedgerSpec::parse("postgres://db/x?sslmode=disable").is_err());
        assert!(LedgerSpec::parse("postgres://db").is_err());
        assert!(LedgerSpec::parse("mysql://db/x").is_err());
        let LedgerSpec::Postgres(t) =
            LedgerSpec::parse("postgresql://db.example:6543/ledger").unwrap()
        else {
            panic!("not postgres")
        };
        assert_eq!(t.to_string(), "postgres://db.example:6543/ledger");
        assert_eq!(
            LedgerSpec::parse("postgres://[::1]/l").unwrap(),
            LedgerSpec::Postgres(pg::PgTarget::parse("postgres://[::1]:5432/l").unwrap())
        );
    }
}
