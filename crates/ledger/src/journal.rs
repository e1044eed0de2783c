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
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use governed_model::digest::sha256_hex;
use governed_model::OutcomeClass;

/// The journal's line, a file shape of its own (`model::record`); named
/// here too, where every ledger reads and writes it.
pub use governed_model::record::{Classification, Event, Record};

pub(crate) const JOURNAL_VERSION: u32 = 1;
/// Version of the checkpoint. 2: a `result` whose class is `unknown` keeps
/// its attempt open. 3: bound to the chain by its head record, no prefix
/// hash (older checkpoints are not trusted, and are replaced).
pub const CHECKPOINT_VERSION: u32 = 3;
/// The largest record whose end `record_ending_at` will look for.
const MAX_RECORD_BYTES: u64 = 16 * 1024 * 1024;
const CHECKPOINT_EVERY: usize = 16;
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// `hint`: for a permission error, who owns what and the fix
    /// ([`permission_hint`](governed_sys::safe_io::permission_hint)).
    #[error("journal unavailable at {path}: {source}{hint}")]
    Unavailable {
        path: String,
        #[source]
        source: std::io::Error,
        hint: String,
    },
    /// The Goal's lock stayed held by another runner, or a cancelling
    /// signal arrived while waiting for it.
    #[error("journal {path} is locked: {end}")]
    LockWait {
        path: String,
        end: governed_sys::wait::WaitEnd,
    },
    #[error("journal {path} is corrupt at line {line}: {detail}")]
    Corrupt {
        path: String,
        line: usize,
        detail: String,
    },
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
        hint: governed_sys::safe_io::permission_hint(path, &source),
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
    /// The state a chain of records folds to (used by the ledger stores).
    pub fn of(entries: &[Entry]) -> Summary {
        let mut s = Summary::new();
        for e in entries {
            s.fold(e);
        }
        s
    }

    fn new() -> Summary {
        Summary {
            last_digest: GENESIS.to_string(),
            ..Summary::default()
        }
    }

    pub fn fold(&mut self, e: &Entry) {
        // parse_chain_from never passes a record with seq u64::MAX.
        self.next_seq = e.record.seq.saturating_add(1);
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

/// A checkpoint beside the journal: the summary of its first `len` bytes
/// (`lines` records). It is a cache, and admission trusts it only when
///
/// - its HMAC-SHA256 verifies under the state dir's checkpoint key
///   (`checkpoints/mac.key`, 32 random bytes, 0600): an edit of any field
///   (spent uses set to zero, an unknown attempt removed) by anything that
///   cannot read that key falls back to a full parse;
/// - it is bound to the chain: the file is at least `len` bytes long and
///   the record that ends at byte `len` is whole, its digest is the
///   summary's `last_digest` and its `seq + 1` the summary's `next_seq`.
///   That record is read backwards from `len`: a run never reads, parses
///   or hashes the prefix before it, so its cost does not grow with the
///   journal. The head's digest commits to the whole prefix through the
///   hash chain; a prefix edited under an authentic checkpoint changes
///   nothing admission decides (it uses the summary the checkpoint
///   authenticates), and `journal verify` re-derives and checks every
///   record.
///
/// Why an HMAC and not a bare hash: a hash of the summary can be recomputed
/// by whoever edits it; the key cannot be read by a child that runs as
/// another uid or under a Landlock read scope. A same-uid child in the
/// default boundary can read the state dir and forge anything in it,
/// checkpoint, journal and runner key alike (the receipt says the key was in
/// its reach); `journal verify` re-derives the whole state from the records
/// and reports any checkpoint that disagrees.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    pub v: u32,
    pub len: u64,
    pub lines: usize,
    pub summary: Summary,
    /// HMAC-SHA256 (hex) of everything above, keyed by the checkpoint key.
    pub mac: String,
}

/// Size bound of a checkpoint file (it holds one Goal's summary).
pub(crate) const MAX_CHECKPOINT_BYTES: u64 = 16 * 1024 * 1024;

impl Checkpoint {
    /// What the MAC covers (fuzzing MACs its checkpoints with it).
    pub fn mac_input(&self) -> Vec<u8> {
        let mut m = format!(
            "governed-exec/checkpoint\n{}\n{}\n{}\n",
            self.v, self.len, self.lines
        )
        .into_bytes();
        m.extend(serde_json::to_vec(&self.summary).unwrap_or_default());
        m
    }
}

/// HMAC-SHA256 (RFC 2104) with a 32-byte key.
pub fn hmac_sha256(key: &[u8; 32], msg: &[u8]) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    // A 32-byte key is always a valid HMAC key; the error arm cannot occur.
    match Hmac::<sha2::Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(msg);
            mac.finalize().into_bytes().into()
        }
        Err(_) => [0u8; 32],
    }
}

/// Whether `mac_hex` is the HMAC of `msg` under `key`, compared in
/// constant time (the `hmac` crate's `verify_slice`).
pub fn hmac_matches(key: &[u8; 32], msg: &[u8], mac_hex: &str) -> bool {
    use hmac::{Hmac, Mac};
    let Ok(claimed) = hex::decode(mac_hex) else {
        return false;
    };
    match Hmac::<sha2::Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(msg);
            mac.verify_slice(&claimed).is_ok()
        }
        Err(_) => false,
    }
}

fn checkpoint_key_path(state_dir: &Path) -> PathBuf {
    state_dir.join("checkpoints").join("mac.key")
}

fn read_checkpoint_key(state_dir: &Path) -> Option<[u8; 32]> {
    let b = governed_sys::safe_io::read_bounded(&checkpoint_key_path(state_dir), 64).ok()?;
    b.try_into().ok()
}

/// The checkpoint key, created (0600, exclusively) on first use.
fn checkpoint_key(state_dir: &Path) -> Option<[u8; 32]> {
    if let Some(k) = read_checkpoint_key(state_dir) {
        return Some(k);
    }
    let mut k = [0u8; 32];
    getrandom::fill(&mut k).ok()?;
    // Written whole through an unpredictable O_EXCL|O_NOFOLLOW temporary,
    // then hard-linked into place: a link never replaces a key another
    // runner created first, and nothing planted beside it is written
    // through.
    let created = governed_sys::safe_io::WriteTarget::new(&checkpoint_key_path(state_dir))
        .and_then(|t| t.create_new(&k, 0o600));
    match created {
        Ok(()) => Some(k),
        Err(_) => read_checkpoint_key(state_dir),
    }
}

/// The state dir's MAC key (it authenticates journal checkpoints and the
/// manifest index), created on first use.
pub fn state_mac_key(state_dir: &Path) -> Option<[u8; 32]> {
    ensure_dir(&state_dir.join("checkpoints")).ok()?;
    checkpoint_key(state_dir)
}

/// [`state_mac_key`] if it exists; never creates it.
pub fn existing_state_mac_key(state_dir: &Path) -> Option<[u8; 32]> {
    read_checkpoint_key(state_dir)
}

/// The Goal's exclusive lock, waited for within the bound and only while no
/// cancelling signal is pending (`os::wait`).
fn lock_goal_file(file: File, path: &Path) -> Result<Flock<File>, JournalError> {
    let mut slot = Some(file);
    governed_sys::wait::bounded(
        governed_sys::wait::lock_wait_bound(),
        governed_sys::wait::Backoff::LOCAL_FILE,
        || {
            let Some(f) = slot.take() else {
                return Err(unavailable(path)(std::io::Error::other(
                    "lost the journal's fd",
                )));
            };
            match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
                Ok(l) => Ok(Some(l)),
                Err((f, nix::errno::Errno::EWOULDBLOCK)) => {
                    slot = Some(f);
                    Ok(None)
                }
                Err((_, e)) => Err(unavailable(path)(e.into())),
            }
        },
        |end| JournalError::LockWait {
            path: path.display().to_string(),
            end,
        },
    )
}

/// Proof that an attempt's `executing` record is durable (written and
/// fsync'd): the only value that lets `supervise::run` spawn, so "spawn
/// before the record" cannot be written. Only `Journal::commit_executing`
/// (or a ledger store after its own durable write) makes one.
#[derive(Debug)]
pub struct Committed {
    attempt_id: String,
    digest: String,
}

impl Committed {
    /// For a ledger store whose own durable write just succeeded.
    pub(crate) fn after_durable_write(attempt_id: String, digest: String) -> Committed {
        Committed { attempt_id, digest }
    }
    pub fn attempt_id(&self) -> &str {
        &self.attempt_id
    }
    /// SHA-256 of the `executing` record (what the receipt closes).
    pub fn digest(&self) -> &str {
        &self.digest
    }
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

/// The state dir of a journal file (`STATE/journal/X.jsonl`).
fn state_of(journal: &Path) -> PathBuf {
    journal
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

/// Checkpoints live beside, not inside, the journal directory, which holds
/// only journals.
pub(crate) fn checkpoint_path(journal: &Path) -> PathBuf {
    let stem = journal.file_stem().unwrap_or_default();
    state_of(journal)
        .join("checkpoints")
        .join(stem)
        .with_extension("json")
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
            // A FIFO or symlink planted at the journal's name is an error,
            // never a hang or a write elsewhere.
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(unavailable(&path))?;
        governed_sys::safe_io::require_regular(&file).map_err(unavailable(&path))?;
        let file = lock_goal_file(file, &path)?;
        let size = file.metadata().map_err(unavailable(&path))?.len();
        // Only the tail past a trusted checkpoint is read: the cost of an
        // open does not grow with the journal's history.
        let (mut summary, start, first_line) = match load_checkpoint(&path, &file, size) {
            Ok(Some(cp)) => (cp.summary, cp.len, cp.lines),
            Ok(None) => (Summary::new(), 0, 0),
            Err((line, detail)) => {
                return Err(JournalError::Corrupt {
                    path: path.display().to_string(),
                    line,
                    detail,
                })
            }
        };
        let tail_len = usize::try_from(size - start).map_err(|_| {
            unavailable(&path)(std::io::Error::from(std::io::ErrorKind::OutOfMemory))
        })?;
        let mut tail = vec![0u8; tail_len];
        std::os::unix::fs::FileExt::read_exact_at(&*file, &mut tail, start)
            .map_err(unavailable(&path))?;
        let entries = parse_chain_from(&path, &tail, &summary, first_line)?;
        for e in &entries {
            summary.fold(e);
        }
        let lines = first_line.saturating_add(entries.len());
        let j = Journal {
            file,
            path,
            dir,
            summary,
            len: size,
            lines,
            entry_synced,
        };
        // Re-checkpoint once the unsummarised tail grows: a few records are
        // cheaper to parse than a checkpoint is to write on every run.
        if entries.len() >= CHECKPOINT_EVERY {
            j.save_checkpoint();
        }
        Ok(j)
    }

    fn save_checkpoint(&self) {
        let dest = checkpoint_path(&self.path);
        if let Some(d) = dest.parent() {
            let _ = fs::DirBuilder::new().recursive(true).mode(0o700).create(d);
        }
        let Some(key) = checkpoint_key(&state_of(&self.path)) else {
            return;
        };
        let mut cp = Checkpoint {
            v: CHECKPOINT_VERSION,
            len: self.len,
            lines: self.lines,
            summary: self.summary.clone(),
            mac: String::new(),
        };
        cp.mac = hex::encode(hmac_sha256(&key, &cp.mac_input()));
        let tmp = dest.with_extension("json.tmp");
        let ok = serde_json::to_vec(&cp)
            .ok()
            .is_some_and(|b| fs::write(&tmp, b).is_ok());
        if ok {
            let _ = fs::rename(&tmp, &dest);
        }
    }

    /// Append one record durably: write, fdatasync the file (and fsync the
    /// directory the first time), all under the lock. Returns the record's
    /// digest.
    pub fn append(&mut self, event: Event) -> Result<String, JournalError> {
        let digest = self.write_record(event)?;
        sync_file(&self.file, &self.path, &self.dir, &mut self.entry_synced)?;
        Ok(digest)
    }

    /// Append one record, let go of the Goal's lock, then make the record
    /// durable (fdatasync; the directory fsync'd the first time) before
    /// returning its digest: other runs of the Goal never wait for this
    /// run's flush, and 12 runs at once share the disk's flushes instead
    /// of queueing behind each other's.
    ///
    /// Why this spends no more uses than there are, and survives a crash:
    /// the record is in the file (the page cache) before the lock is
    /// released, so every later reader counts it, durable or not. The
    /// caller spawns only after this returns `Ok`, that is once the record
    /// is on disk. A later record's fdatasync flushes this one too (same
    /// file, earlier bytes), so the disk never holds a later record without
    /// this one. If the flush fails, the record stays in the file as an
    /// attempt with no result and no live runner: `unknown`, which blocks
    /// the Goal until a person resolves it (fail closed), exactly as a
    /// flush failure under the lock did.
    pub(crate) fn append_then_unlock(mut self, event: Event) -> Result<String, JournalError> {
        let digest = self.write_record(event)?;
        let Journal {
            file,
            path,
            dir,
            mut entry_synced,
            ..
        } = self;
        let file = file
            .unlock()
            .map_err(|(_, e)| unavailable(&path)(e.into()))?;
        governed_fault::point("unlocked_before_flush");
        sync_file(&file, &path, &dir, &mut entry_synced)?;
        Ok(digest)
    }

    /// Write one record at the end of the file (not yet durable) and fold
    /// it into the summary.
    fn write_record(&mut self, event: Event) -> Result<String, JournalError> {
        if self.summary.next_seq == u64::MAX {
            return Err(JournalError::Corrupt {
                path: self.path.display().to_string(),
                line: self.lines + 1,
                detail: "sequence numbers exhausted".into(),
            });
        }
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
        self.summary.fold(&Entry {
            record,
            digest: digest.clone(),
        });
        self.len += buf.len() as u64;
        self.lines += 1;
        Ok(digest)
    }

    /// Append an `executing` record durably, the Goal's lock released
    /// before the flush ([`Journal::append_then_unlock`]): the use is
    /// spent, and the returned `Committed` is what allows the spawn.
    pub(crate) fn commit_executing(self, event: Event) -> Result<Committed, JournalError> {
        let Event::Executing { attempt_id, .. } = &event else {
            return Err(JournalError::Corrupt {
                path: self.path.display().to_string(),
                line: self.lines + 1,
                detail: "only an executing record commits an attempt".into(),
            });
        };
        let attempt_id = attempt_id.clone();
        let digest = self.append_then_unlock(event)?;
        Ok(Committed::after_durable_write(attempt_id, digest))
    }

    /// The folded state of this Goal's journal.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// Attempts of this Goal with no result or resolution: `running` while a
    /// runner holds their lock, `unknown` otherwise.
    pub fn open_attempts(&self, state_dir: &Path) -> Vec<AttemptSummary> {
        open_attempts_with(&self.summary, &|id| attempt_is_live(state_dir, id))
    }
}

/// A Goal's attempts with no result or resolution: `running` while
/// `is_live` (the store's liveness witness) says a runner holds them,
/// `unknown` otherwise or when their result said so.
pub(crate) fn open_attempts_with(
    summary: &Summary,
    is_live: &dyn Fn(&str) -> bool,
) -> Vec<AttemptSummary> {
    summary
        .open
        .iter()
        .map(|(id, a)| AttemptSummary {
            attempt_id: id.clone(),
            lease_id: a.lease_id.clone(),
            goal_id: a.goal_id.clone(),
            goal_revision: a.goal_revision,
            state: if !a.result_unknown && is_live(id) {
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

/// fdatasync a journal file, and fsync its directory the first time.
fn sync_file(
    file: &File,
    path: &Path,
    dir: &Path,
    entry_synced: &mut bool,
) -> Result<(), JournalError> {
    file.sync_data().map_err(unavailable(path))?;
    if !*entry_synced {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(unavailable(dir))?;
        *entry_synced = true;
    }
    Ok(())
}

/// The checkpoint of `journal` if it is trusted for the open `file` of
/// `file_len` bytes (see [`Checkpoint`]); reads only the checkpoint and
/// the one record that ends where it does. A checkpoint that is absent,
/// unreadable, forged or of another version is `Ok(None)` (a full parse
/// follows). An authentic current one that the file no longer matches is
/// an `Err`: governed-exec wrote it over this journal, so the journal was
/// cut short, deleted and re-created, or had records edited or removed
/// before that point, and a full parse of what is left could give back
/// spent uses or hide an unknown attempt.
fn load_checkpoint(
    journal: &Path,
    file: &File,
    file_len: u64,
) -> Result<Option<Checkpoint>, (usize, String)> {
    let Some(raw) =
        governed_sys::safe_io::read_bounded(&checkpoint_path(journal), MAX_CHECKPOINT_BYTES).ok()
    else {
        return Ok(None);
    };
    let Ok(cp) = serde_json::from_slice::<Checkpoint>(&raw) else {
        return Ok(None);
    };
    let Some(key) = read_checkpoint_key(&state_of(journal)) else {
        return Ok(None);
    };
    let authentic = hmac_matches(&key, &cp.mac_input(), &cp.mac);
    if !authentic || cp.v != CHECKPOINT_VERSION {
        return Ok(None);
    }
    let tampered = || {
        (
            cp.lines,
            format!(
                "the journal no longer holds the {} records ({} bytes) its authenticated checkpoint summarises: records were removed or edited",
                cp.lines, cp.len
            ),
        )
    };
    if cp.len > file_len {
        return Err(tampered());
    }
    let Some(head) = record_ending_at(file, cp.len) else {
        return Err(tampered());
    };
    if checkpoint_bound(&cp, &key, file_len, &head) {
        Ok(Some(cp))
    } else {
        Err(tampered())
    }
}

/// The record that ends (with its newline) at byte `end` of `file`, without
/// the newline: read backwards in growing chunks, never the whole prefix.
/// Empty for `end` 0; `None` if no newline ends there or the record is
/// larger than [`MAX_RECORD_BYTES`].
fn record_ending_at(file: &File, end: u64) -> Option<Vec<u8>> {
    if end == 0 {
        return Some(Vec::new());
    }
    let mut chunk: u64 = 4096;
    loop {
        let start = end.saturating_sub(chunk);
        let mut buf = vec![0u8; usize::try_from(end - start).ok()?];
        std::os::unix::fs::FileExt::read_exact_at(file, &mut buf, start).ok()?;
        let body = buf.strip_suffix(b"\n")?;
        if let Some(i) = body.iter().rposition(|b| *b == b'\n') {
            return Some(body[i + 1..].to_vec());
        }
        if start == 0 {
            return Some(body.to_vec());
        }
        if chunk > MAX_RECORD_BYTES {
            return None;
        }
        chunk *= 2;
    }
}

/// Whether `cp` may stand in for parsing the first `cp.len` bytes of the
/// journal whose whole bytes are `bytes` (`journal verify`, fuzzing; a run
/// reads only the head record, see [`load_checkpoint`]).
pub fn checkpoint_trusted(cp: &Checkpoint, key: &[u8; 32], bytes: &[u8]) -> bool {
    let Ok(len) = usize::try_from(cp.len) else {
        return false;
    };
    let Some(prefix) = bytes.get(..len) else {
        return false;
    };
    let head = if prefix.is_empty() {
        prefix
    } else {
        let Some(body) = prefix.strip_suffix(b"\n") else {
            return false;
        };
        body.iter()
            .rposition(|b| *b == b'\n')
            .map_or(body, |i| &body[i + 1..])
    };
    checkpoint_bound(cp, key, bytes.len() as u64, head)
}

/// Authentic (HMAC), current (version), within the file, and bound to the
/// chain by `head`, the record ending at `cp.len`: its digest is the
/// summary's `last_digest`, its `seq + 1` the summary's `next_seq`. An
/// empty prefix goes with the genesis summary.
fn checkpoint_bound(cp: &Checkpoint, key: &[u8; 32], file_len: u64, head: &[u8]) -> bool {
    let mac_ok = hmac_matches(key, &cp.mac_input(), &cp.mac);
    if !mac_ok || cp.v != CHECKPOINT_VERSION || cp.len > file_len {
        return false;
    }
    let summary = &cp.summary;
    if cp.len == 0 {
        return cp.lines == 0 && summary.next_seq == 0 && summary.last_digest == GENESIS;
    }
    let Ok(record) = serde_json::from_slice::<Record>(head) else {
        return false;
    };
    cp.lines > 0
        && sha256_hex(head) == summary.last_digest
        && record.seq.checked_add(1) == Some(summary.next_seq)
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

/// Every attempt with its state; `is_live` says whether a runner still
/// holds an attempt (the store's liveness witness).
pub(crate) fn attempts_of_with(
    entries: &[Entry],
    is_live: &dyn Fn(&str) -> bool,
) -> Vec<AttemptSummary> {
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
        if !is_live(&a.attempt_id) {
            a.state = AttemptState::Unknown;
        }
    }
    out
}

/// The state after folding the records in `bytes` onto `after` (as
/// `Journal::open` does past a checkpoint): fuzzing entry for checkpoints.
pub fn fold_after(
    path: &Path,
    bytes: &[u8],
    after: &Summary,
    first_line: usize,
) -> Result<Summary, JournalError> {
    let mut s = after.clone();
    for e in parse_chain_from(path, bytes, after, first_line)? {
        s.fold(&e);
    }
    Ok(s)
}

/// Check a whole journal's bytes; the number of records (fuzzing entry).
pub fn parse_journal_bytes(path: &Path, bytes: &[u8]) -> Result<usize, JournalError> {
    parse_chain(path, bytes).map(|e| e.len())
}

/// Parse and check one whole chain (newline-terminated records); `path`
/// only names it in errors.
pub fn parse_chain(path: &Path, bytes: &[u8]) -> Result<Vec<Entry>, JournalError> {
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
        let line = first_line
            .saturating_add(bytes.iter().filter(|b| **b == b'\n').count())
            .saturating_add(1);
        return Err(corrupt(
            line,
            "torn record: the last line is incomplete".into(),
        ));
    }
    let body = &bytes[..bytes.len() - 1];
    for (i, line) in body.split(|b| *b == b'\n').enumerate() {
        let n = first_line.saturating_add(i).saturating_add(1);
        let record: Record = serde_json::from_slice(line)
            .map_err(|e| corrupt(n, format!("unreadable record: {e}")))?;
        if record.v != JOURNAL_VERSION {
            return Err(corrupt(n, format!("unknown journal version {}", record.v)));
        }
        let (want_seq, want_prev) = match entries.last() {
            Some(prev) => (prev.record.seq.checked_add(1), prev.digest.as_str()),
            None => (Some(after.next_seq), after.last_digest.as_str()),
        };
        // The last sequence number is never used: its successor would not
        // fit, so a chain that reached it is exhausted.
        let Some(want_seq) = want_seq.filter(|s| *s < u64::MAX) else {
            return Err(corrupt(n, "sequence numbers exhausted".into()));
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

/// One Goal's journal file and its records, or what breaks it.
pub type ChainRead = (PathBuf, Result<Vec<Entry>, JournalError>);

/// Every Goal's journal of the state dir, each read and checked once.
pub fn read_all(state_dir: &Path) -> Result<Vec<ChainRead>, JournalError> {
    let dir = state_dir.join("journal");
    let rd = match fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(unavailable(&dir)(e)),
    };
    let mut paths: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    Ok(paths
        .into_iter()
        .map(|p| {
            let r = fs::read(&p)
                .map_err(unavailable(&p))
                .and_then(|b| parse_chain(&p, &b));
            (p, r)
        })
        .collect())
}

/// Every Goal's journal, checked: how many records each holds, or what
/// breaks it (`journal verify`).
pub fn verify_all(state_dir: &Path) -> Result<Vec<ChainCheck>, JournalError> {
    Ok(read_all(state_dir)?
        .into_iter()
        .map(|(p, r)| (p, r.map(|e| e.len())))
        .collect())
}

/// One Goal's journal, read and checked without taking its lock (a
/// reader such as `verify`): its records, none when it has no journal.
pub fn read_goal(state_dir: &Path, goal_id: &str) -> Result<Vec<Entry>, JournalError> {
    let p = state_dir.join("journal").join(journal_file_name(goal_id));
    match fs::read(&p) {
        Ok(b) => parse_chain(&p, &b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(unavailable(&p)(e)),
    }
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
    // Never blocks: a FIFO planted at the lock's name is not a live runner.
    let Ok(file) =
        governed_sys::safe_io::open_regular(&attempt_lock_path(state_dir, attempt_id), false)
    else {
        return false;
    };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_) => false,
        Err((_, e)) => e == nix::errno::Errno::EWOULDBLOCK,
    }
}

/// What `journal verify` found in one Goal's journal, re-derived from its
/// records alone.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    pub records: usize,
    /// The state the records fold to.
    pub summary: Summary,
    /// Attempts whose outcome is unknown and unresolved: they block the Goal.
    pub blocking: Vec<String>,
    /// Broken invariants and checkpoint disagreements (any makes it fail).
    pub problems: Vec<String>,
    /// Facts worth a line that break nothing.
    pub notes: Vec<String>,
}

/// Re-derive a journal's state from its records, check the invariants, and
/// compare the checkpoint (if any) with the records it claims to summarise.
pub fn audit(path: &Path, bytes: &[u8]) -> Result<Audit, JournalError> {
    let entries = parse_chain(path, bytes)?;
    let state_dir = state_of(path);
    let mut a = Audit {
        records: entries.len(),
        ..Audit::default()
    };
    a.problems = invariant_violations(&entries);
    let summary = {
        let mut s = Summary::new();
        for e in &entries {
            s.fold(e);
        }
        s
    };
    for (id, open) in &summary.open {
        if open.result_unknown || !attempt_is_live(&state_dir, id) {
            a.blocking.push(id.clone());
        }
    }
    a.summary = summary;
    check_checkpoint(path, bytes, &entries, &mut a);
    Ok(a)
}

/// The invariants every journal keeps, checked on its records alone.
pub fn invariant_violations(entries: &[Entry]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut executed: BTreeMap<&str, &str> = BTreeMap::new(); // attempt -> lease
    let mut uses: BTreeMap<&str, (u64, u64)> = BTreeMap::new(); // lease -> (spent, min max_uses)
    let mut closed: BTreeSet<&str> = BTreeSet::new();
    // Attempts whose result said unknown and that no resolution closed yet.
    let mut unresolved: BTreeSet<&str> = BTreeSet::new();
    for e in entries {
        let line = e.record.seq;
        match &e.record.event {
            Event::Executing {
                attempt_id,
                lease_id,
                max_uses,
                ..
            } => {
                if let Some(u) = unresolved.iter().next() {
                    problems.push(format!(
                        "record {line}: attempt {attempt_id} started while attempt {u}'s unknown outcome was unresolved"
                    ));
                }
                if executed.insert(attempt_id, lease_id).is_some() {
                    problems.push(format!(
                        "record {line}: attempt {attempt_id} has a second executing record"
                    ));
                }
                let u = uses.entry(lease_id).or_insert((0, *max_uses));
                u.0 += 1;
                u.1 = u.1.min(*max_uses);
                if u.0 > u.1 {
                    problems.push(format!(
                        "record {line}: lease {lease_id} spent use {} of {}",
                        u.0, u.1
                    ));
                }
            }
            Event::Result {
                attempt_id,
                outcome,
                ..
            } => {
                if !executed.contains_key(attempt_id.as_str()) {
                    problems.push(format!(
                        "record {line}: result for attempt {attempt_id}, which has no executing record before it"
                    ));
                } else if !closed.insert(attempt_id) {
                    problems.push(format!(
                        "record {line}: attempt {attempt_id} already had a result or a resolution"
                    ));
                } else if *outcome == OutcomeClass::Unknown {
                    unresolved.insert(attempt_id);
                    // Still open: only a resolution closes it.
                    closed.remove(attempt_id.as_str());
                }
            }
            Event::Resolution { attempt_id, .. } => {
                if !executed.contains_key(attempt_id.as_str()) {
                    problems.push(format!(
                        "record {line}: resolution of attempt {attempt_id}, which has no executing record before it"
                    ));
                } else if !closed.insert(attempt_id) {
                    problems.push(format!(
                        "record {line}: resolution of attempt {attempt_id}, which already had a result or a resolution"
                    ));
                }
                unresolved.remove(attempt_id.as_str());
            }
            Event::Revocation { .. } | Event::Refusal { .. } => {}
        }
    }
    problems
}

fn check_checkpoint(path: &Path, bytes: &[u8], entries: &[Entry], a: &mut Audit) {
    let cp_path = checkpoint_path(path);
    let raw = match governed_sys::safe_io::read_bounded(&cp_path, MAX_CHECKPOINT_BYTES) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            a.problems
                .push(format!("checkpoint {}: {e}", cp_path.display()));
            return;
        }
    };
    let cp: Checkpoint = match serde_json::from_slice(&raw) {
        Ok(c) => c,
        Err(e) => {
            a.notes.push(format!(
                "checkpoint {} is not one this release writes ({e}); admission ignores it",
                cp_path.display()
            ));
            return;
        }
    };
    let what = format!("checkpoint {}", cp_path.display());
    let derived = usize::try_from(cp.len)
        .ok()
        .filter(|_| cp.lines <= entries.len())
        .map(|_| {
            let mut s = Summary::new();
            for e in &entries[..cp.lines] {
                s.fold(e);
            }
            s
        });
    match derived {
        None => a.problems.push(format!(
            "{what} claims {} records, more than the journal's {}",
            cp.lines,
            entries.len()
        )),
        Some(s) if s != cp.summary => a.problems.push(format!(
            "{what} disagrees with the state re-derived from the journal's first {} records ({})",
            cp.lines,
            summary_difference(&s, &cp.summary)
        )),
        Some(_) => {}
    }
    match read_checkpoint_key(&state_of(path)) {
        Some(key) if checkpoint_trusted(&cp, &key, bytes) => {}
        Some(key)
            if cp.v == CHECKPOINT_VERSION
                && hmac_matches(&key, &cp.mac_input(), &cp.mac) =>
        {
            a.problems.push(format!(
                "{what} is authentic but the journal no longer matches it: records before its end were removed or edited (admission refuses the journal)"
            ))
        }
        Some(_) => a.problems.push(format!(
            "{what} fails its authentication: it was edited outside governed-exec (admission ignores it)"
        )),
        None => a.problems.push(format!(
            "{what} exists but the checkpoint key does not (admission ignores it)"
        )),
    }
}

fn summary_difference(derived: &Summary, claimed: &Summary) -> String {
    let mut d = Vec::new();
    if derived.next_seq != claimed.next_seq || derived.last_digest != claimed.last_digest {
        d.push("chain position".to_string());
    }
    for (lease, n) in &derived.uses {
        let c = claimed.uses.get(lease).copied().unwrap_or(0);
        if c != *n {
            d.push(format!(
                "lease {lease}: {n} uses spent, checkpoint says {c}"
            ));
        }
    }
    for lease in claimed
        .uses
        .keys()
        .filter(|l| !derived.uses.contains_key(*l))
    {
        d.push(format!("lease {lease}: no use spent, checkpoint says some"));
    }
    for id in derived
        .open
        .keys()
        .filter(|k| !claimed.open.contains_key(*k))
    {
        d.push(format!("attempt {id} is open, the checkpoint hides it"));
    }
    if derived.revoked != claimed.revoked {
        d.push("revocations differ".into());
    }
    if d.is_empty() {
        d.push("open attempts differ".into());
    }
    d.join("; ")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The state dir's MAC key is created through a temporary nobody can
    /// name in advance: a symlink planted where a predictable temporary
    /// would go (`mac.key.tmp<pid>`) is never written through, and the key
    /// that comes back is the one on disk.
    #[test]
    fn the_mac_key_is_never_written_through_a_planted_link() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        let victim = d.path().join("victim");
        fs::write(&victim, b"keep").unwrap();
        fs::create_dir_all(state.join("checkpoints")).unwrap();
        let planted = state
            .join("checkpoints")
            .join(format!("mac.tmp{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let key = state_mac_key(&state).expect("a key");
        assert_eq!(
            fs::read(&victim).unwrap(),
            b"keep",
            "written through the link"
        );
        assert_eq!(existing_state_mac_key(&state), Some(key));
        let mode = fs::metadata(checkpoint_key_path(&state))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
    }

    /// A checkpoint of an empty journal is bound only as the genesis
    /// state: length 0, no lines, sequence 0, the genesis digest; any one
    /// of them otherwise (under a valid MAC) is not the empty journal's.
    #[test]
    fn an_empty_journals_checkpoint_is_only_the_genesis_state() {
        let key = [5u8; 32];
        let sealed = |lines: usize, next_seq: u64, last: &str| {
            let mut cp = Checkpoint {
                v: CHECKPOINT_VERSION,
                len: 0,
                lines,
                summary: Summary {
                    next_seq,
                    last_digest: last.to_string(),
                    ..Summary::default()
                },
                mac: String::new(),
            };
            cp.mac = hex::encode(hmac_sha256(&key, &cp.mac_input()));
            cp
        };
        assert!(checkpoint_bound(&sealed(0, 0, GENESIS), &key, 0, b""));
        assert!(
            !checkpoint_bound(&sealed(1, 0, GENESIS), &key, 0, b""),
            "lines"
        );
        assert!(
            !checkpoint_bound(&sealed(0, 1, GENESIS), &key, 0, b""),
            "next_seq"
        );
        assert!(
            !checkpoint_bound(&sealed(0, 0, &"ab".repeat(32)), &key, 0, b""),
            "digest"
        );
        let mut forged = sealed(0, 0, GENESIS);
        forged.mac = hex::encode([0u8; 32]);
        assert!(!checkpoint_bound(&forged, &key, 0, b""), "MAC");
    }

    /// `uses` counts one per executing record of a lease.
    #[test]
    fn each_executing_record_counts_one_use() {
        let d = tempfile::tempdir().unwrap();
        let mut j = Journal::open(d.path(), "g").unwrap();
        for a in ["a1", "a2", "a3"] {
            j.append(executing("g", a, "lease-1", 1)).unwrap();
        }
        j.append(executing("g", "b1", "lease-2", 1)).unwrap();
        assert_eq!(j.summary().uses.get("lease-1"), Some(&3));
        assert_eq!(j.summary().uses.get("lease-2"), Some(&1));
    }
    use governed_model::CleanupState;
    pub(crate) use governed_testkit::fixtures::executing;

    /// The `hmac` crate gives the textbook HMAC-SHA256 (RFC 2104) the
    /// checkpoints and manifest indexes were MAC'd with before it: existing
    /// state dirs keep verifying.
    #[test]
    fn hmac_is_the_textbook_construction_and_verifies_in_constant_time() {
        use sha2::{Digest, Sha256};
        let key = [7u8; 32];
        for msg in [&b""[..], b"checkpoint", &[0xffu8; 200][..]] {
            let mut ipad = [0x36u8; 64];
            let mut opad = [0x5cu8; 64];
            for (i, k) in key.iter().enumerate() {
                ipad[i] ^= k;
                opad[i] ^= k;
            }
            let inner = Sha256::new()
                .chain_update(ipad)
                .chain_update(msg)
                .finalize();
            let want: [u8; 32] = Sha256::new()
                .chain_update(opad)
                .chain_update(inner)
                .finalize()
                .into();
            assert_eq!(hmac_sha256(&key, msg), want);
            assert!(hmac_matches(&key, msg, &hex::encode(want)));
            let mut bad = want;
            bad[31] ^= 1;
            assert!(!hmac_matches(&key, msg, &hex::encode(bad)));
            assert!(!hmac_matches(&key, msg, "zz"));
            assert!(!hmac_matches(&key, msg, &hex::encode(&want[..31])));
        }
    }

    /// A forged checkpoint claiming `usize::MAX` lines panicked a debug
    /// build (add with overflow while numbering the tail's lines).
    #[test]
    fn a_checkpoint_claiming_the_most_lines_does_not_panic() {
        let c = Checkpoint {
            v: CHECKPOINT_VERSION,
            len: 0,
            lines: usize::MAX,
            summary: Summary::new(),
            mac: String::new(),
        };
        governed_testkit::fuzzing::checkpoint(&serde_json::to_vec(&c).unwrap());
    }

    fn revocation(i: usize) -> Event {
        Event::Revocation {
            lease_id: format!("lease-{i}"),
            by: "t".into(),
        }
    }

    fn journal_path(state: &Path) -> PathBuf {
        state.join("journal").join(journal_file_name("g"))
    }

    fn append_n(state: &Path, n: usize) {
        let mut j = Journal::open(state, "g").unwrap();
        for i in 0..n {
            j.append(revocation(i)).unwrap();
        }
    }

    fn saved(state: &Path) -> Option<Checkpoint> {
        let raw = fs::read(checkpoint_path(&journal_path(state))).ok()?;
        serde_json::from_slice(&raw).ok()
    }

    /// Exactly 16 unsummarised records make `open` save a checkpoint; 15
    /// do not.
    #[test]
    fn sixteen_records_save_a_checkpoint_fifteen_do_not() {
        let d = tempfile::tempdir().unwrap();
        append_n(d.path(), 15);
        drop(Journal::open(d.path(), "g").unwrap());
        assert!(saved(d.path()).is_none(), "saved after 15");
        append_n(d.path(), 1);
        let j = Journal::open(d.path(), "g").unwrap();
        assert_eq!(j.lines, 16);
        drop(j);
        let cp = saved(d.path()).expect("no checkpoint after 16 records");
        assert_eq!((cp.lines, cp.summary.next_seq), (16, 16));
        assert_eq!(cp.summary.revoked.len(), 15); // lease-0..14, then lease-0 again
        if std::env::var_os("UPDATE_FUZZ_SEEDS").is_some() {
            let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
                .join("fuzz/seeds/checkpoint");
            fs::write(dir.join("sixteen.json"), serde_json::to_vec(&cp).unwrap()).unwrap();
            let mut max = cp.clone();
            max.summary.next_seq = u64::MAX;
            fs::write(
                dir.join("next-seq-max.json"),
                serde_json::to_vec(&max).unwrap(),
            )
            .unwrap();
        }
    }

    /// A trusted checkpoint is loaded: the next open parses only the tail
    /// (15 records, so it does not re-checkpoint). Were it not loaded, the
    /// 31-record parse would overwrite it.
    #[test]
    fn a_saved_checkpoint_is_loaded_and_only_the_tail_parsed() {
        let d = tempfile::tempdir().unwrap();
        append_n(d.path(), 16);
        drop(Journal::open(d.path(), "g").unwrap());
        let first = saved(d.path()).unwrap();
        append_n(d.path(), 15);
        let j = Journal::open(d.path(), "g").unwrap();
        assert_eq!(j.lines, 31);
        assert_eq!(j.summary.next_seq, 31);
        assert_eq!(j.summary.revoked.len(), 16); // lease-0..15, then 0..14 again
        drop(j);
        assert_eq!(
            saved(d.path()).unwrap().len,
            first.len,
            "re-parsed from zero"
        );
        // One more record: the tail reaches 16 and a new checkpoint is saved.
        append_n(d.path(), 1);
        drop(Journal::open(d.path(), "g").unwrap());
        assert_eq!(saved(d.path()).unwrap().lines, 32);
    }

    fn setup_checkpoint() -> (tempfile::TempDir, Checkpoint, [u8; 32], Vec<u8>) {
        let d = tempfile::tempdir().unwrap();
        append_n(d.path(), 16);
        drop(Journal::open(d.path(), "g").unwrap());
        let cp = saved(d.path()).unwrap();
        let key = read_checkpoint_key(d.path()).unwrap();
        let bytes = fs::read(journal_path(d.path())).unwrap();
        (d, cp, key, bytes)
    }

    fn remac(cp: &mut Checkpoint, key: &[u8; 32]) {
        cp.mac = hex::encode(hmac_sha256(key, &cp.mac_input()));
    }

    #[test]
    fn each_checkpoint_condition_alone_refuses_it() {
        let (d, cp, key, bytes) = setup_checkpoint();
        assert!(checkpoint_trusted(&cp, &key, &bytes));
        let load = |bytes: &[u8]| {
            let jp = journal_path(d.path());
            fs::write(&jp, bytes).unwrap();
            let f = File::open(&jp).unwrap();
            load_checkpoint(&jp, &f, bytes.len() as u64)
        };
        assert!(matches!(load(&bytes), Ok(Some(_))));
        // The MAC alone.
        let mut c = cp.clone();
        c.summary.uses.insert("x".into(), 0);
        assert!(
            !checkpoint_trusted(&c, &key, &bytes),
            "unauthenticated edit"
        );
        remac(&mut c, &key);
        assert!(!checkpoint_trusted(&c, &[1u8; 32], &bytes), "another key");
        // Each other condition, with a valid MAC.
        let mut c = cp.clone();
        c.v = 1;
        remac(&mut c, &key);
        assert!(!checkpoint_trusted(&c, &key, &bytes), "version");
        let mut c = cp.clone();
        c.len = bytes.len() as u64 + 1;
        remac(&mut c, &key);
        assert!(
            !checkpoint_trusted(&c, &key, &bytes),
            "longer than the file"
        );
        // The head record (the last one the checkpoint covers) edited.
        let len = cp.len as usize;
        let mut edited = bytes.clone();
        edited[len - 5] ^= 1;
        assert!(!checkpoint_trusted(&cp, &key, &edited), "head edited");
        // From the file, an authentic checkpoint over an edited head is
        // tampering, never a silent full parse.
        assert!(load(&edited).is_err(), "head edited (from the file)");
        // So is a journal cut short below the checkpoint.
        assert!(load(&bytes[..len / 2]).is_err(), "journal cut short");
        assert!(load(b"").is_err(), "journal deleted and re-created");
        // Not a record boundary.
        let mut c = cp.clone();
        c.len -= 1;
        remac(&mut c, &key);
        assert!(!checkpoint_trusted(&c, &key, &bytes), "inside a record");
        // An edit before the head is left to `journal verify`: admission
        // uses the summary the checkpoint authenticates either way.
        let mut edited = bytes.clone();
        edited[5] ^= 1;
        assert!(checkpoint_trusted(&cp, &key, &edited));
        assert!(matches!(load(&edited), Ok(Some(_))));
        assert!(audit(Path::new("t"), &edited).is_err(), "journal verify");
        let mut c = cp.clone();
        c.summary.next_seq = 17;
        remac(&mut c, &key);
        assert!(!checkpoint_trusted(&c, &key, &bytes), "next_seq not bound");
        let mut c = cp.clone();
        c.lines = 0;
        remac(&mut c, &key);
        assert!(
            !checkpoint_trusted(&c, &key, &bytes),
            "no records claimed for a prefix that holds some"
        );
        let mut c = cp.clone();
        c.summary.last_digest = GENESIS.into();
        remac(&mut c, &key);
        assert!(
            !checkpoint_trusted(&c, &key, &bytes),
            "last digest not bound"
        );
        // A checkpoint of a shorter prefix (a true one) is still trusted.
        let first_line_end = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
        let one = parse_chain(Path::new("t"), &bytes[..first_line_end]).unwrap();
        let mut s = Summary::new();
        s.fold(&one[0]);
        let mut c = Checkpoint {
            v: CHECKPOINT_VERSION,
            len: first_line_end as u64,
            lines: 1,
            summary: s,
            mac: String::new(),
        };
        remac(&mut c, &key);
        assert!(checkpoint_trusted(&c, &key, &bytes));
        // The file on disk with its MAC broken is not loaded.
        let mut c = cp.clone();
        c.mac = "00".repeat(32);
        fs::write(
            checkpoint_path(&journal_path(d.path())),
            serde_json::to_vec(&c).unwrap(),
        )
        .unwrap();
        assert!(matches!(load(&bytes), Ok(None)));
    }

    /// `journal verify` (the audit) says which way a checkpoint is wrong:
    /// one edited without the key fails its authentication; one the key
    /// made that no longer fits the records (the journal was edited under
    /// it) is tampering; one without its key is said; a true one is no
    /// problem. Each is one line, and never the other's.
    #[test]
    fn the_audit_tells_a_forged_checkpoint_from_an_edited_journal() {
        let (d, cp, key, bytes) = setup_checkpoint();
        let jp = journal_path(d.path());
        let audit_with = |c: &Checkpoint| {
            fs::write(checkpoint_path(&jp), serde_json::to_vec(c).unwrap()).unwrap();
            audit(&jp, &bytes).unwrap()
        };
        let a = audit_with(&cp);
        assert!(a.problems.is_empty(), "{:?}", a.problems);
        assert_eq!(a.records, 16);
        let only = |a: &Audit, what: &str| {
            let hits: Vec<_> = a.problems.iter().filter(|p| p.contains(what)).collect();
            assert_eq!(hits.len(), 1, "{what}: {:?}", a.problems);
        };
        // Forged: its summary is the true one, its MAC is not.
        let mut forged = cp.clone();
        forged.mac = "00".repeat(32);
        let a = audit_with(&forged);
        only(&a, "fails its authentication");
        assert_eq!(a.problems.len(), 1, "{:?}", a.problems);
        // Authentic (remade with the key) but bound to another chain position.
        let mut moved = cp.clone();
        moved.summary.next_seq += 1;
        remac(&mut moved, &key);
        let a = audit_with(&moved);
        only(&a, "is authentic but the journal no longer matches it");
        assert!(!a.problems.iter().any(|p| p.contains("authentication")));
        // Authentic in an older version: not this release's, so not trusted.
        let mut old = cp.clone();
        old.v = CHECKPOINT_VERSION + 1;
        remac(&mut old, &key);
        only(&audit_with(&old), "fails its authentication");
        // Claiming more records than the journal has.
        let mut long = cp.clone();
        long.lines = 17;
        remac(&mut long, &key);
        only(
            &audit_with(&long),
            "claims 17 records, more than the journal's 16",
        );
        // The key gone.
        audit_with(&cp);
        fs::remove_file(checkpoint_key_path(d.path())).unwrap();
        let a = audit(&jp, &bytes).unwrap();
        only(&a, "the checkpoint key does not");
        assert_eq!(a.problems.len(), 1, "{:?}", a.problems);
    }

    /// Each invariant `journal verify` checks, broken once, is reported
    /// once, and a journal that keeps them all reports nothing: a result or
    /// a resolution needs an executing record before it and closes its
    /// attempt once; an attempt executes once.
    #[test]
    fn each_broken_invariant_is_reported_and_a_sound_journal_is_not() {
        let d = tempfile::tempdir().unwrap();
        let executing = |a: &str| executing("g", a, "l", 9);
        let result = |a: &str| Event::Result {
            attempt_id: a.into(),
            outcome: OutcomeClass::Exited,
            reason: None,
            exit_code: Some(0),
            signal: None,
            cleanup: CleanupState::Gone,
            receipt_sha256: "r".into(),
        };
        let resolution = |a: &str| Event::Resolution {
            attempt_id: a.into(),
            classification: Classification::Failed,
            by: "p".into(),
            note: None,
        };
        let problems = |events: Vec<Event>| {
            let _ = fs::remove_dir_all(d.path().join("journal"));
            let _ = fs::remove_dir_all(d.path().join("checkpoints"));
            let mut j = Journal::open(d.path(), "g").unwrap();
            for e in events {
                j.append(e).unwrap();
            }
            drop(j);
            let bytes = fs::read(journal_path(d.path())).unwrap();
            invariant_violations(&parse_chain(Path::new("t"), &bytes).unwrap())
        };
        let sound = problems(vec![
            executing("a1"),
            result("a1"),
            executing("a2"),
            resolution("a2"),
        ]);
        assert!(sound.is_empty(), "{sound:?}");
        let broken = problems(vec![
            result("ghost"),
            resolution("ghost"),
            executing("a1"),
            result("a1"),
            result("a1"),
            resolution("a1"),
            executing("a1"),
        ]);
        assert_eq!(
            broken,
            [
                "record 0: result for attempt ghost, which has no executing record before it",
                "record 1: resolution of attempt ghost, which has no executing record before it",
                "record 4: attempt a1 already had a result or a resolution",
                "record 5: resolution of attempt a1, which already had a result or a resolution",
                "record 6: attempt a1 has a second executing record",
            ]
        );
    }

    /// `record_ending_at` finds the record that ends at a byte offset by
    /// reading backwards in doubling chunks: a record longer than the first
    /// chunk, one exactly `MAX_RECORD_BYTES` long (the largest looked for:
    /// the checkpoint's head record can be that large), the first record
    /// of the file and an empty prefix.
    #[test]
    fn record_ending_at_finds_records_of_any_size_up_to_the_bound() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("j");
        for n in [10u64, 5_000, MAX_RECORD_BYTES] {
            let big = vec![b'x'; usize::try_from(n).unwrap()];
            let mut bytes = b"first\n".to_vec();
            bytes.extend_from_slice(&big);
            bytes.extend_from_slice(b"\nlast\n");
            fs::write(&p, &bytes).unwrap();
            let f = File::open(&p).unwrap();
            let end = 6 + n + 1;
            assert_eq!(record_ending_at(&f, end).as_deref(), Some(&big[..]), "{n}");
            assert_eq!(record_ending_at(&f, 6).as_deref(), Some(&b"first"[..]));
            let total = bytes.len() as u64;
            assert_eq!(record_ending_at(&f, total).as_deref(), Some(&b"last"[..]));
            assert_eq!(record_ending_at(&f, 0).as_deref(), Some(&b""[..]));
            assert_eq!(record_ending_at(&f, end - 1), None, "not a record's end");
        }
    }

    /// Line numbers and sequence arithmetic when continuing a chain.
    #[test]
    fn continuing_a_chain_checks_and_numbers_from_the_checkpoint() {
        let d = tempfile::tempdir().unwrap();
        append_n(d.path(), 3);
        let bytes = fs::read(journal_path(d.path())).unwrap();
        let all = parse_chain(Path::new("t"), &bytes).unwrap();
        assert_eq!(
            all.iter().map(|e| e.record.seq).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        let cut = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
        let mut after = Summary::new();
        after.fold(&all[0]);
        let tail = parse_chain_from(Path::new("t"), &bytes[cut..], &after, 1).unwrap();
        assert_eq!(tail.len(), 2);
        assert_eq!(tail[0].record.seq, 1);
        // The wrong position: sequence mismatch reported at line 1 + 1.
        let wrong = Summary {
            next_seq: 5,
            ..after.clone()
        };
        match parse_chain_from(Path::new("t"), &bytes[cut..], &wrong, 1) {
            Err(JournalError::Corrupt { line, detail, .. }) => {
                assert_eq!(line, 2);
                assert!(detail.contains("sequence 1 where 5"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        // A torn tail is reported at its own line number.
        let torn = &bytes[cut..bytes.len() - 1];
        match parse_chain_from(Path::new("t"), torn, &after, 1) {
            Err(JournalError::Corrupt { line, .. }) => assert_eq!(line, 3),
            other => panic!("{other:?}"),
        }
        // A broken link on the second record of the tail.
        let mut edited = bytes[cut..].to_vec();
        let second = edited.iter().position(|b| *b == b'\n').unwrap() + 1;
        let prev_at = second
            + edited[second..]
                .windows(7)
                .position(|w| w == b"\"prev\":")
                .unwrap()
            + 8;
        edited[prev_at] = if edited[prev_at] == b'0' { b'1' } else { b'0' };
        match parse_chain_from(Path::new("t"), &edited, &after, 1) {
            Err(JournalError::Corrupt { line, detail, .. }) => {
                assert_eq!(line, 3);
                assert!(detail.contains("hash chain"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// `next_seq` at `u64::MAX` is exhausted, never an overflow.
    #[test]
    fn sequence_numbers_never_overflow() {
        let d = tempfile::tempdir().unwrap();
        append_n(d.path(), 1);
        let bytes = fs::read(journal_path(d.path())).unwrap();
        let at_max = Summary {
            next_seq: u64::MAX,
            ..Summary::new()
        };
        let line = String::from_utf8(bytes.clone())
            .unwrap()
            .replace("\"seq\":0", &format!("\"seq\":{}", u64::MAX));
        assert!(parse_chain_from(Path::new("t"), line.as_bytes(), &at_max, 0).is_err());
        let mut j = Journal::open(d.path(), "g").unwrap();
        j.summary.next_seq = u64::MAX;
        assert!(matches!(
            j.append(revocation(0)),
            Err(JournalError::Corrupt { .. })
        ));
        let e = Entry {
            record: Record {
                v: 1,
                seq: u64::MAX,
                prev: GENESIS.into(),
                at: "x".into(),
                event: revocation(0),
            },
            digest: GENESIS.into(),
        };
        let mut s = Summary::new();
        s.fold(&e);
        assert_eq!(s.next_seq, u64::MAX);
        governed_testkit::fuzzing::checkpoint(
            &serde_json::to_vec(&Checkpoint {
                v: CHECKPOINT_VERSION,
                len: 0,
                lines: 0,
                summary: at_max,
                mac: String::new(),
            })
            .unwrap(),
        );
    }

    /// A result of class `unknown` keeps its attempt open; any other
    /// result, or a resolution, closes it.
    #[test]
    fn an_unknown_result_keeps_the_attempt_open() {
        let d = tempfile::tempdir().unwrap();
        let mut j = Journal::open(d.path(), "g").unwrap();
        for (a, class) in [("a1", OutcomeClass::Unknown), ("a2", OutcomeClass::Exited)] {
            j.append(executing("g", a, "l", 1)).unwrap();
            j.append(Event::Result {
                attempt_id: a.into(),
                outcome: class,
                reason: None,
                exit_code: None,
                signal: None,
                cleanup: CleanupState::Gone,
                receipt_sha256: "r".into(),
            })
            .unwrap();
        }
        let open = j.open_attempts(d.path());
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].attempt_id, "a1");
        assert_eq!(open[0].state, AttemptState::Unknown);
        // Lease l spent 2 uses of 1: journal verify's invariant says so.
        drop(j);
        let bytes = fs::read(journal_path(d.path())).unwrap();
        let a = audit(&journal_path(d.path()), &bytes).unwrap();
        assert_eq!(a.blocking, ["a1"]);
        assert!(
            a.problems.iter().any(|p| p.contains("spent use 2 of 1")),
            "{:?}",
            a.problems
        );
        assert!(
            a.problems
                .iter()
                .any(|p| p.contains("unknown outcome was unresolved")),
            "{:?}",
            a.problems
        );
        let mut j = Journal::open(d.path(), "g").unwrap();
        j.append(Event::Resolution {
            attempt_id: "a1".into(),
            classification: Classification::Failed,
            by: "p".into(),
            note: None,
        })
        .unwrap();
        assert!(j.open_attempts(d.path()).is_empty());
    }

    /// What the audit says of a checkpoint beyond its authenticity: none at
    /// all is no problem (a journal of fewer than 16 records has none); one
    /// that cannot be read is a problem; an authentic one whose summary is
    /// not the one its records fold to names what differs.
    #[test]
    fn the_audit_reads_a_missing_unreadable_or_disagreeing_checkpoint_for_what_it_is() {
        let d = tempfile::tempdir().unwrap();
        append_n(d.path(), 3);
        let jp = journal_path(d.path());
        let bytes = fs::read(&jp).unwrap();
        let a = audit(&jp, &bytes).unwrap();
        assert!(a.problems.is_empty() && a.notes.is_empty(), "{a:?}");
        assert_eq!(a.records, 3);
        // A directory where the checkpoint goes: unreadable, said so.
        fs::create_dir_all(checkpoint_path(&jp)).unwrap();
        let a = audit(&jp, &bytes).unwrap();
        assert_eq!(a.problems.len(), 1, "{:?}", a.problems);
        assert!(
            a.problems[0].starts_with(&format!("checkpoint {}: ", checkpoint_path(&jp).display())),
            "{:?}",
            a.problems
        );
        // Authentic and bound to the chain, but summarising a use that no
        // record spent.
        let (d, cp, key, bytes) = setup_checkpoint();
        let jp = journal_path(d.path());
        let mut lying = cp.clone();
        lying.summary.uses.insert("lease-x".into(), 1);
        remac(&mut lying, &key);
        assert!(checkpoint_trusted(&lying, &key, &bytes));
        fs::write(checkpoint_path(&jp), serde_json::to_vec(&lying).unwrap()).unwrap();
        let a = audit(&jp, &bytes).unwrap();
        assert_eq!(
            a.problems,
            [format!(
                "checkpoint {} disagrees with the state re-derived from the journal's first 16 records (lease lease-x: no use spent, checkpoint says some)",
                checkpoint_path(&jp).display()
            )]
        );
    }

    /// The difference is named field by field, and only where there is one.
    #[test]
    fn a_summary_difference_names_each_field_that_differs() {
        let base = || {
            let mut s = Summary::new();
            s.next_seq = 4;
            s.uses.insert("a".into(), 2);
            s.revoked.insert("r".into());
            s
        };
        let open = || OpenAttempt {
            lease_id: "a".into(),
            goal_id: "g".into(),
            goal_revision: 1,
            started_at: "t".into(),
            executing_record_sha256: "e".into(),
            result_unknown: false,
        };
        let diff = |f: &dyn Fn(&mut Summary), g: &dyn Fn(&mut Summary)| {
            let (mut derived, mut claimed) = (base(), base());
            f(&mut derived);
            g(&mut claimed);
            summary_difference(&derived, &claimed)
        };
        let none = |_: &mut Summary| {};
        assert_eq!(diff(&none, &|c| c.next_seq = 5), "chain position");
        assert_eq!(
            diff(&none, &|c| c.last_digest = "x".into()),
            "chain position"
        );
        assert_eq!(
            diff(&none, &|c| {
                c.uses.insert("a".into(), 1);
            }),
            "lease a: 2 uses spent, checkpoint says 1"
        );
        assert_eq!(
            diff(
                &|d| {
                    d.uses.insert("b".into(), 1);
                },
                &none
            ),
            "lease b: 1 uses spent, checkpoint says 0"
        );
        assert_eq!(
            diff(&none, &|c| {
                c.uses.insert("b".into(), 1);
            }),
            "lease b: no use spent, checkpoint says some"
        );
        assert_eq!(
            diff(
                &|d| {
                    d.open.insert("x".into(), open());
                },
                &none
            ),
            "attempt x is open, the checkpoint hides it"
        );
        assert_eq!(
            diff(&none, &|c| {
                c.revoked.clear();
            }),
            "revocations differ"
        );
        // An attempt the checkpoint says is open that the records closed.
        assert_eq!(
            diff(&none, &|c| {
                c.open.insert("x".into(), open());
            }),
            "open attempts differ"
        );
        assert_eq!(
            diff(&|d| d.next_seq = 9, &|c| c.revoked.clear()),
            "chain position; revocations differ"
        );
    }

    /// An attempt blocks its Goal in the audit when its result said
    /// `unknown`, or when no runner holds it any more; one a live runner
    /// holds does not.
    #[test]
    fn the_audit_blocks_on_unknown_or_abandoned_attempts_not_on_live_ones() {
        let d = tempfile::tempdir().unwrap();
        let mut j = Journal::open(d.path(), "g").unwrap();
        for a in ["abandoned", "live", "unknown"] {
            j.append(executing("g", a, "l", 9)).unwrap();
        }
        j.append(Event::Result {
            attempt_id: "unknown".into(),
            outcome: OutcomeClass::Unknown,
            reason: None,
            exit_code: None,
            signal: None,
            cleanup: CleanupState::NotConfirmed,
            receipt_sha256: "r".into(),
        })
        .unwrap();
        drop(j);
        let _live = AttemptLock::acquire(d.path(), "live").unwrap();
        let _also_live = AttemptLock::acquire(d.path(), "unknown").unwrap();
        let jp = journal_path(d.path());
        let a = audit(&jp, &fs::read(&jp).unwrap()).unwrap();
        assert_eq!(a.blocking, ["abandoned", "unknown"]);
    }

    /// A lease may spend exactly its `max_uses`; one more is a violation.
    #[test]
    fn spending_the_last_use_keeps_the_invariant_and_one_more_breaks_it() {
        let d = tempfile::tempdir().unwrap();
        let mut j = Journal::open(d.path(), "g").unwrap();
        j.append(executing("g", "a1", "l", 2)).unwrap();
        j.append(executing("g", "a2", "l", 2)).unwrap();
        let entries = |d: &Path| {
            let bytes = fs::read(journal_path(d)).unwrap();
            parse_chain(Path::new("t"), &bytes).unwrap()
        };
        assert!(invariant_violations(&entries(d.path())).is_empty());
        j.append(executing("g", "a3", "l", 2)).unwrap();
        assert_eq!(
            invariant_violations(&entries(d.path())),
            ["record 2: lease l spent use 3 of 2"]
        );
    }
}
