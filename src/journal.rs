//! The durable, append-only, hash-chained journal: what spends a use, and
//! what survives a crash.
//!
//! One JSON-lines file per Goal id under `STATE/journal/`. Each record carries
//! the SHA-256 of the previous line, so an edited, reordered, removed or torn
//! record breaks the chain. Writers hold an exclusive `flock` on the file for
//! the read-check-append critical section only (never for the whole run), so
//! runs of other Goals never wait and runs of the same Goal serialize only
//! their admission.
//!
//! The `executing` record is appended and fsync'd (file, then directory)
//! *before* the child is forked: that record is what spends a use. A live
//! runner holds an exclusive lock on `STATE/attempts/<attempt>.lock` for the
//! whole attempt; an `executing` record with no result whose lock can be
//! taken belongs to a runner that is gone, and is an `unknown` outcome that
//! blocks every later run of that Goal until a person `resolve`s it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::model::{CleanupState, DirIdentity, ExecutableIdentity, GoalRef, OutcomeClass, Reason};
use crate::sign::sha256_hex;

pub const JOURNAL_VERSION: u32 = 1;
/// Version of the checkpoint's summary fold. 2: a `result` whose class is
/// `unknown` keeps its attempt open (older checkpoints are not trusted).
const CHECKPOINT_VERSION: u32 = 2;
const CHECKPOINT_EVERY: usize = 16;
const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal unavailable at {path}: {source}")]
    Unavailable {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("journal {path} is corrupt at line {line}: {detail}")]
    Corrupt {
        path: String,
        line: usize,
        detail: String,
    },
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Classification {
    Success,
    Failed,
    Stop,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// Written and fsync'd before fork; spends one use of the lease.
    Executing {
        attempt_id: String,
        lease_id: String,
        lease_fingerprint: String,
        goal: GoalRef,
        use_number: u64,
        max_uses: u64,
        runner_pid: u32,
        executable: Box<ExecutableIdentity>,
        cwd: Box<DirIdentity>,
    },
    /// Written after the process tree is reaped and the receipt is built.
    Result {
        attempt_id: String,
        outcome: OutcomeClass,
        reason: Option<Reason>,
        exit_code: Option<i32>,
        signal: Option<i32>,
        cleanup: CleanupState,
        receipt_sha256: String,
    },
    /// A person's classification of an `unknown` attempt. Never evidence.
    Resolution {
        attempt_id: String,
        classification: Classification,
        by: String,
        note: Option<String>,
    },
    Revocation {
        lease_id: String,
        by: String,
    },
    /// A run refused before anything was spent.
    Refusal {
        lease_id: Option<String>,
        reason: Reason,
        message: String,
    },
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub v: u32,
    pub seq: u64,
    pub prev: String,
    pub at: String,
    pub event: Event,
}

/// A parsed record and the SHA-256 of its line.
#[derive(Debug, Clone)]
pub struct Entry {
    pub record: Record,
    pub digest: String,
}

/// State of one attempt, derived from its records.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptState {
    Running,
    Done,
    Unknown,
    Resolved,
}

pub fn default_state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GOVERNED_EXEC_STATE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("governed-exec");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/".into());
    PathBuf::from(home).join(".local/state/governed-exec")
}

fn unavailable(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    move |source| JournalError::Unavailable {
        path: path.display().to_string(),
        source,
    }
}

/// Create `dir` (0700) if needed and check that it is a directory.
pub fn ensure_dir(dir: &Path) -> Result<(), JournalError> {
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => Ok(()),
        Err(e) => Err(unavailable(dir)(e)),
    }
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

fn journal_file_name(goal_id: &str) -> String {
    format!("{}.jsonl", &sha256_hex(goal_id.as_bytes())[..32])
}

/// An executing record with neither result nor resolution yet.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct OpenAttempt {
    pub lease_id: String,
    pub goal_id: String,
    pub goal_revision: u64,
    pub started_at: String,
    pub executing_record_sha256: String,
    /// Its result record says `unknown`: it blocks the Goal like a crashed
    /// runner's attempt, until a person resolves it.
    #[serde(default)]
    pub result_unknown: bool,
}

/// What admission needs from a Goal's journal, folded record by record.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub next_seq: u64,
    pub last_digest: String,
    pub uses: BTreeMap<String, u64>,
    pub revoked: BTreeSet<String>,
    pub open: BTreeMap<String, OpenAttempt>,
}

impl Summary {
    fn new() -> Summary {
        Summary {
            last_digest: GENESIS.to_string(),
            ..Summary::default()
        }
    }

    fn fold(&mut self, e: &Entry) {
        self.next_seq = e.record.seq + 1;
        self.last_digest = e.digest.clone();
        match &e.record.event {
            Event::Executing {
                attempt_id,
                lease_id,
                goal,
                ..
            } => {
                *self.uses.entry(lease_id.clone()).or_default() += 1;
                self.open.insert(
                    attempt_id.clone(),
                    OpenAttempt {
                        lease_id: lease_id.clone(),
                        goal_id: goal.id.clone(),
                        goal_revision: goal.revision,
                        started_at: e.record.at.clone(),
                        executing_record_sha256: e.digest.clone(),
                        result_unknown: false,
                    },
                );
            }
            // An unknown outcome is not an ending: the attempt stays open
            // (and blocking) until a person's resolution closes it.
            Event::Result {
                attempt_id,
                outcome: OutcomeClass::Unknown,
                ..
            } => {
                if let Some(a) = self.open.get_mut(attempt_id) {
                    a.result_unknown = true;
                }
            }
            Event::Result { attempt_id, .. } | Event::Resolution { attempt_id, .. } => {
                self.open.remove(attempt_id);
            }
            Event::Revocation { lease_id, .. } => {
                self.revoked.insert(lease_id.clone());
            }
            Event::Refusal { .. } => {}
        }
    }
}

/// A checkpoint beside the journal: the summary of its first `len` bytes,
/// trusted only while those bytes still hash to `prefix_sha256`. Hashing the
/// prefix is ~100x cheaper than parsing it, and any edit of it (even one that
/// keeps the length) falls back to a full, fail-closed parse.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Checkpoint {
    v: u32,
    len: u64,
    lines: usize,
    prefix_sha256: String,
    summary: Summary,
}

/// One Goal's journal, locked for the lifetime of this value.
pub struct Journal {
    file: Flock<File>,
    path: PathBuf,
    dir: PathBuf,
    summary: Summary,
    /// Bytes and lines in the file (all parsed or checkpointed).
    len: u64,
    lines: usize,
    /// Whether the file's directory entry is known to be durable.
    entry_synced: bool,
}

/// Checkpoints live beside, not inside, the journal directory, which holds
/// only journals.
fn checkpoint_path(journal: &Path) -> PathBuf {
    let stem = journal.file_stem().unwrap_or_default();
    let state = journal
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    state.join("checkpoints").join(stem).with_extension("json")
}

impl Journal {
    /// Open (creating if absent), lock exclusively, read and check the chain.
    /// A torn or unparseable record fails closed with `Corrupt`.
    pub fn open(state_dir: &Path, goal_id: &str) -> Result<Journal, JournalError> {
        let dir = state_dir.join("journal");
        ensure_dir(&dir)?;
        let path = dir.join(journal_file_name(goal_id));
        // The directory entry needs an fsync only once, after the file is
        // created; appends to a file whose entry is durable need only the
        // file's own fdatasync. An empty file may be one whose creation was
        // never synced, so it counts as new.
        let entry_synced = fs::metadata(&path).is_ok_and(|m| m.len() > 0);
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .map_err(unavailable(&path))?;
        let mut file = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, e)| unavailable(&path)(e.into()))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(unavailable(&path))?;
        let (mut summary, start, first_line) = match load_checkpoint(&path, &bytes) {
            Some(cp) => (cp.summary, cp.len as usize, cp.lines),
            None => (Summary::new(), 0, 0),
        };
        let tail = parse_chain_from(&path, &bytes[start..], &summary, first_line)?;
        for e in &tail {
            summary.fold(e);
        }
        let lines = first_line + tail.len();
        let j = Journal {
            file,
            path,
            dir,
            summary,
            len: bytes.len() as u64,
            lines,
            entry_synced,
        };
        // Re-checkpoint once the unsummarised tail grows: a few records are
        // cheaper to parse than a checkpoint is to write on every run.
        if tail.len() >= CHECKPOINT_EVERY {
            j.save_checkpoint(&bytes);
        }
        Ok(j)
    }

    fn save_checkpoint(&self, bytes: &[u8]) {
        let cp = Checkpoint {
            v: CHECKPOINT_VERSION,
            len: bytes.len() as u64,
            lines: self.lines,
            prefix_sha256: sha256_hex(bytes),
            summary: self.summary.clone(),
        };
        let dest = checkpoint_path(&self.path);
        if let Some(d) = dest.parent() {
            let _ = fs::DirBuilder::new().recursive(true).mode(0o700).create(d);
        }
        let tmp = dest.with_extension("json.tmp");
        let ok = serde_json::to_vec(&cp)
            .ok()
            .is_some_and(|b| fs::write(&tmp, b).is_ok());
        if ok {
            let _ = fs::rename(&tmp, &dest);
        }
    }

    /// Append one record durably: write, fdatasync the file (and fsync the
    /// directory the first time). Returns the record's digest.
    pub fn append(&mut self, event: Event) -> Result<String, JournalError> {
        let record = Record {
            v: JOURNAL_VERSION,
            seq: self.summary.next_seq,
            prev: self.summary.last_digest.clone(),
            at: now_rfc3339(),
            event,
        };
        let line = serde_json::to_vec(&record).map_err(|e| unavailable(&self.path)(e.into()))?;
        let digest = sha256_hex(&line);
        let mut buf = line;
        buf.push(b'\n');
        self.file.write_all(&buf).map_err(unavailable(&self.path))?;
        self.file.sync_data().map_err(unavailable(&self.path))?;
        if !self.entry_synced {
            File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .map_err(unavailable(&self.dir))?;
            self.entry_synced = true;
        }
        self.summary.fold(&Entry {
            record,
            digest: digest.clone(),
        });
        self.len += buf.len() as u64;
        self.lines += 1;
        Ok(digest)
    }

    /// Uses of `lease_id` already spent (its `executing` records).
    pub fn uses_spent(&self, lease_id: &str) -> u64 {
        self.summary.uses.get(lease_id).copied().unwrap_or(0)
    }

    pub fn is_revoked(&self, lease_id: &str) -> bool {
        self.summary.revoked.contains(lease_id)
    }

    /// Attempts of this Goal with no result or resolution: `running` while a
    /// runner holds their lock, `unknown` otherwise.
    pub fn open_attempts(&self, state_dir: &Path) -> Vec<AttemptSummary> {
        self.summary
            .open
            .iter()
            .map(|(id, a)| AttemptSummary {
                attempt_id: id.clone(),
                lease_id: a.lease_id.clone(),
                goal_id: a.goal_id.clone(),
                goal_revision: a.goal_revision,
                state: if !a.result_unknown && attempt_is_live(state_dir, id) {
                    AttemptState::Running
                } else {
                    AttemptState::Unknown
                },
                outcome: a.result_unknown.then_some(OutcomeClass::Unknown),
                classification: None,
                started_at: a.started_at.clone(),
                executing_record_sha256: a.executing_record_sha256.clone(),
                receipt_sha256: None,
            })
            .collect()
    }
}

fn load_checkpoint(journal: &Path, bytes: &[u8]) -> Option<Checkpoint> {
    let raw = fs::read(checkpoint_path(journal)).ok()?;
    let cp: Checkpoint = serde_json::from_slice(&raw).ok()?;
    let len = usize::try_from(cp.len).ok()?;
    let valid = cp.v == CHECKPOINT_VERSION
        && len <= bytes.len()
        && sha256_hex(&bytes[..len]) == cp.prefix_sha256;
    valid.then_some(cp)
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct AttemptSummary {
    pub attempt_id: String,
    pub lease_id: String,
    pub goal_id: String,
    pub goal_revision: u64,
    pub state: AttemptState,
    pub outcome: Option<OutcomeClass>,
    pub classification: Option<Classification>,
    pub started_at: String,
    pub executing_record_sha256: String,
    pub receipt_sha256: Option<String>,
}

pub fn attempts_of(entries: &[Entry], state_dir: &Path) -> Vec<AttemptSummary> {
    let mut out: Vec<AttemptSummary> = Vec::new();
    for e in entries {
        match &e.record.event {
            Event::Executing {
                attempt_id,
                lease_id,
                goal,
                ..
            } => out.push(AttemptSummary {
                attempt_id: attempt_id.clone(),
                lease_id: lease_id.clone(),
                goal_id: goal.id.clone(),
                goal_revision: goal.revision,
                state: AttemptState::Running,
                outcome: None,
                classification: None,
                started_at: e.record.at.clone(),
                executing_record_sha256: e.digest.clone(),
                receipt_sha256: None,
            }),
            Event::Result {
                attempt_id,
                outcome,
                receipt_sha256,
                ..
            } => {
                if let Some(a) = out.iter_mut().find(|a| &a.attempt_id == attempt_id) {
                    a.state = if *outcome == OutcomeClass::Unknown {
                        AttemptState::Unknown
                    } else {
                        AttemptState::Done
                    };
                    a.outcome = Some(*outcome);
                    a.receipt_sha256 = Some(receipt_sha256.clone());
                }
            }
            Event::Resolution {
                attempt_id,
                classification,
                ..
            } => {
                if let Some(a) = out.iter_mut().find(|a| &a.attempt_id == attempt_id) {
                    a.state = AttemptState::Resolved;
                    a.classification = Some(*classification);
                }
            }
            Event::Revocation { .. } | Event::Refusal { .. } => {}
        }
    }
    for a in out.iter_mut().filter(|a| a.state == AttemptState::Running) {
        if !attempt_is_live(state_dir, &a.attempt_id) {
            a.state = AttemptState::Unknown;
        }
    }
    out
}

/// Check a whole journal's bytes; the number of records (fuzzing entry).
pub fn parse_journal_bytes(path: &Path, bytes: &[u8]) -> Result<usize, JournalError> {
    parse_chain(path, bytes).map(|e| e.len())
}

fn parse_chain(path: &Path, bytes: &[u8]) -> Result<Vec<Entry>, JournalError> {
    parse_chain_from(path, bytes, &Summary::new(), 0)
}

/// Parse records continuing a chain whose last record is summarised by
/// `after`, the first of them at line `first_line + 1`.
fn parse_chain_from(
    path: &Path,
    bytes: &[u8],
    after: &Summary,
    first_line: usize,
) -> Result<Vec<Entry>, JournalError> {
    let corrupt = |line: usize, detail: String| JournalError::Corrupt {
        path: path.display().to_string(),
        line,
        detail,
    };
    let mut entries: Vec<Entry> = Vec::new();
    if bytes.is_empty() {
        return Ok(entries);
    }
    if !bytes.ends_with(b"\n") {
        let line = first_line + bytes.iter().filter(|b| **b == b'\n').count() + 1;
        return Err(corrupt(
            line,
            "torn record: the last line is incomplete".into(),
        ));
    }
    let body = &bytes[..bytes.len() - 1];
    for (i, line) in body.split(|b| *b == b'\n').enumerate() {
        let n = first_line + i + 1;
        let record: Record = serde_json::from_slice(line)
            .map_err(|e| corrupt(n, format!("unreadable record: {e}")))?;
        if record.v != JOURNAL_VERSION {
            return Err(corrupt(n, format!("unknown journal version {}", record.v)));
        }
        let (want_seq, want_prev) = match entries.last() {
            Some(prev) => (prev.record.seq + 1, prev.digest.as_str()),
            None => (after.next_seq, after.last_digest.as_str()),
        };
        if record.seq != want_seq {
            return Err(corrupt(
                n,
                format!(
                    "sequence {} where {want_seq} was expected (record removed or reordered)",
                    record.seq
                ),
            ));
        }
        if record.prev != want_prev {
            return Err(corrupt(
                n,
                "hash chain broken: the previous record was edited, removed or reordered".into(),
            ));
        }
        entries.push(Entry {
            record,
            digest: sha256_hex(line),
        });
    }
    Ok(entries)
}

/// One journal file and whether its chain is intact (its record count).
pub type ChainCheck = (PathBuf, Result<usize, JournalError>);

pub fn verify_all(state_dir: &Path) -> Result<Vec<ChainCheck>, JournalError> {
    let dir = state_dir.join("journal");
    let mut out = Vec::new();
    let rd = match fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(unavailable(&dir)(e)),
    };
    let mut paths: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        let r = fs::read(&p)
            .map_err(unavailable(&p))
            .and_then(|b| parse_chain(&p, &b))
            .map(|e| e.len());
        out.push((p, r));
    }
    Ok(out)
}

/// Read every journal in `state_dir` (for `journal list/show`).
pub fn read_all(state_dir: &Path) -> Result<Vec<Entry>, JournalError> {
    let mut all = Vec::new();
    for (p, r) in verify_all(state_dir)? {
        r?;
        let bytes = fs::read(&p).map_err(unavailable(&p))?;
        all.extend(parse_chain(&p, &bytes)?);
    }
    Ok(all)
}

/// Find the journal holding `attempt_id` and return its goal id.
pub fn goal_of_attempt(state_dir: &Path, attempt_id: &str) -> Result<Option<String>, JournalError> {
    Ok(read_all(state_dir)?
        .into_iter()
        .find_map(|e| match e.record.event {
            Event::Executing {
                attempt_id: a,
                goal,
                ..
            } if a == attempt_id => Some(goal.id),
            _ => None,
        }))
}

fn attempt_lock_path(state_dir: &Path, attempt_id: &str) -> PathBuf {
    state_dir
        .join("attempts")
        .join(format!("{attempt_id}.lock"))
}

/// Held by the live runner for the whole attempt.
pub struct AttemptLock {
    lock: Flock<File>,
    path: PathBuf,
}

impl AttemptLock {
    pub fn acquire(state_dir: &Path, attempt_id: &str) -> Result<AttemptLock, JournalError> {
        let dir = state_dir.join("attempts");
        ensure_dir(&dir)?;
        let path = attempt_lock_path(state_dir, attempt_id);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .map_err(unavailable(&path))?;
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| unavailable(&path)(e.into()))?;
        Ok(AttemptLock { lock, path })
    }

    /// The attempt is finished (its result is journaled or it reads as
    /// unknown either way): remove the lock file, then let go of the lock.
    /// Only a crashed runner's lock file stays behind.
    pub fn release(self) {
        let _ = fs::remove_file(&self.path);
        drop(self.lock);
    }
}

/// Whether a runner still holds the attempt's lock.
pub fn attempt_is_live(state_dir: &Path, attempt_id: &str) -> bool {
    let Ok(file) = File::open(attempt_lock_path(state_dir, attempt_id)) else {
        return false;
    };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_) => false,
        Err((_, e)) => e == nix::errno::Errno::EWOULDBLOCK,
    }
}

/// Write a file and fsync its content (not its directory entry).
pub fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// fsync the directory holding `path` (`.` for a bare file name), making a
/// create or rename of that entry durable.
pub fn sync_parent_dir(path: &Path) -> std::io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

/// Write a file durably (content, then directory entry).
pub fn write_durable(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    write_synced(path, bytes, mode)?;
    sync_parent_dir(path)
}
