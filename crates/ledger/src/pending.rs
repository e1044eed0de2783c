//! The human approval queue (CONTRACT §12): `STATE_DIR/pending/ID.json`,
//! one file a request that no live lease answered.
//!
//! Why files in the state dir: a request refused for want of a lease names
//! no ledger (no lease matched), so the ledger the run would have used is
//! the runner's state dir. Each entry is replaced whole through a fresh
//! `O_EXCL|O_NOFOLLOW` temporary and a rename, under one `flock` on
//! `pending/.lock`, so concurrent refusals of the same request count once
//! each and never tear a file.
//!
//! Why it cannot fill the disk: an entry is keyed by what it asks for (the
//! same request asked a thousand times is one file with a count), it
//! expires a day after it was last asked for or decided, and a Goal holds
//! at most [`MAX_PER_GOAL`] live entries; past that a refusal is not
//! queued, and says so.
//!
//! Who may write here: `run` queues; only the operator's commands
//! (`pending deny`, `approve --pending`) decide. Nothing an agent sends
//! over MCP reaches [`decide`].

use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use governed_model::pending::{PendingApproval, PendingExecutable, PendingState, PENDING_SCHEMA};
use governed_model::{DirIdentity, GoalRef, Reason, Request};
use governed_sys::safe_io;

/// Live entries one Goal may hold.
pub const MAX_PER_GOAL: usize = 64;
/// Entries the whole queue may hold (every Goal of the state dir).
pub const MAX_TOTAL: usize = 1024;
/// How long an entry lives after it was last asked for or decided.
pub const TTL: Duration = Duration::from_secs(24 * 3600);
/// Askers one entry names.
pub const MAX_PRINCIPALS: usize = 16;
/// The largest entry: a request whose entry would be larger is not queued
/// (and a larger file is never read back).
pub const MAX_ENTRY_BYTES: usize = 64 << 10;

#[derive(Debug, thiserror::Error)]
pub enum PendingError {
    #[error("pending approval {0:?} is not in the queue (ids look like pend-0123456789abcdef; `governed-exec pending list` shows them)")]
    UnknownId(String),
    #[error("pending approval {id} is {state}, not pending: nothing to decide")]
    Decided { id: String, state: PendingState },
    #[error("the approval queue {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--key: {0}")]
    Key(String),
    #[error("pending approval file {path} is not a pending approval: {why}")]
    Bad { path: String, why: String },
}

/// What a refused request became in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Queued {
    /// Waiting for a person (new, or asked again).
    Pending(PendingApproval),
    /// A person already said no; the entry is kept until it expires.
    Denied(PendingApproval),
    /// Not queued: the Goal's or the queue's bound is reached.
    Full { limit: usize },
    /// Not queued: the request's entry would be `size` bytes, past
    /// [`MAX_ENTRY_BYTES`].
    TooLarge { size: usize },
}

/// What identifies a request in the queue.
pub struct Asked<'a> {
    pub goal: GoalRef,
    pub workspace: &'a str,
    pub request: &'a Request,
    pub executable: PendingExecutable,
    pub cwd: DirIdentity,
    pub reason: Reason,
    pub principal: &'a str,
}

/// `pend-` and 16 hex digits of SHA-256 over every element that names the
/// request, each length-prefixed so no two different requests share an
/// encoding.
pub fn id_of(a: &Asked<'_>) -> String {
    let mut h = Sha256::new();
    let mut field = |b: &[u8]| {
        h.update((b.len() as u64).to_be_bytes());
        h.update(b);
    };
    field(PENDING_SCHEMA.as_bytes());
    field(a.goal.id.as_bytes());
    field(&a.goal.revision.to_be_bytes());
    field(a.goal.sha256.as_bytes());
    field(a.workspace.as_bytes());
    field(a.request.executable.as_bytes());
    field(&(a.request.argv.len() as u64).to_be_bytes());
    for arg in &a.request.argv {
        field(arg.as_bytes());
    }
    field(a.request.cwd.as_bytes());
    field(a.request.profile.to_string().as_bytes());
    field(a.executable.canonical_path.as_bytes());
    field(a.executable.sha256.as_bytes());
    field(a.cwd.path.as_bytes());
    field(&a.cwd.device.to_be_bytes());
    field(&a.cwd.inode.to_be_bytes());
    format!("pend-{}", &hex::encode(h.finalize())[..16])
}

/// Whether `id` has the shape of a queue id (and so names a file inside
/// the queue, never a path out of it).
pub fn valid_id(id: &str) -> bool {
    id.len() == 21
        && id.starts_with("pend-")
        && id[5..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

fn expired(e: &PendingApproval, now: SystemTime) -> bool {
    humantime::parse_rfc3339(&e.expires_at).map_or(true, |t| t <= now)
}

/// The queue of one state dir.
pub struct Queue {
    dir: PathBuf,
}

impl Queue {
    pub fn of(state_dir: &Path) -> Queue {
        Queue {
            dir: state_dir.join("pending"),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn io(&self, source: std::io::Error) -> PendingError {
        let hint = safe_io::permission_hint(&self.dir, &source);
        PendingError::Io {
            path: format!("{}{hint}", self.dir.display()),
            source,
        }
    }

    fn path_of(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// The queue's lock, held for a read-modify-write.
    fn lock(&self, create: bool) -> Result<Option<nix::fcntl::Flock<std::fs::File>>, PendingError> {
        match std::fs::symlink_metadata(&self.dir) {
            Ok(m) if !m.is_dir() => {
                return Err(self.io(std::io::Error::other(
                    "not a directory (a symlink or file is not followed): remove it",
                )))
            }
            _ => {}
        }
        if create {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.dir)
                .map_err(|e| self.io(e))?;
        } else if !self.dir.is_dir() {
            return Ok(None);
        }
        let f = safe_io::open_lock_file(&self.dir.join(".lock")).map_err(|e| self.io(e))?;
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
            .map(Some)
            .map_err(|(_, e)| self.io(std::io::Error::from(e)))
    }

    fn read(&self, path: &Path) -> Result<PendingApproval, PendingError> {
        let bad = |why: String| PendingError::Bad {
            path: path.display().to_string(),
            why,
        };
        let mut bytes = Vec::new();
        safe_io::open_regular(path, false)
            .and_then(|f| f.take(MAX_ENTRY_BYTES as u64 + 1).read_to_end(&mut bytes))
            .map_err(|e| bad(e.to_string()))?;
        if bytes.len() > MAX_ENTRY_BYTES {
            return Err(bad(format!("larger than {MAX_ENTRY_BYTES} bytes")));
        }
        let e: PendingApproval = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        if e.schema != PENDING_SCHEMA {
            return Err(bad(format!("schema {:?}, not {PENDING_SCHEMA}", e.schema)));
        }
        if !valid_id(&e.id) || path.file_stem().and_then(|s| s.to_str()) != Some(e.id.as_str()) {
            return Err(bad(format!("its id {:?} is not its file name", e.id)));
        }
        Ok(e)
    }

    fn write(&self, e: &PendingApproval) -> Result<(), PendingError> {
        let mut text = Self::encode(e)?;
        text.push(b'\n');
        safe_io::replace_file(&self.path_of(&e.id), &text, 0o600).map_err(|x| self.io(x))
    }

    fn encode(e: &PendingApproval) -> Result<Vec<u8>, PendingError> {
        serde_json::to_vec(e).map_err(|x| PendingError::Bad {
            path: e.id.clone(),
            why: x.to_string(),
        })
    }

    /// The queue as it is: the live entries (expired ones removed from
    /// disk when `sweep`, under the lock) and every other file.
    fn scan(&self, now: SystemTime, sweep: bool) -> Result<Listing, PendingError> {
        let mut scan = Listing::default();
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(scan),
            Err(e) => return Err(self.io(e)),
        };
        for ent in rd.flatten() {
            let name = ent.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let path = ent.path();
            let entry_name = name.strip_suffix(".json").is_some_and(valid_id);
            if !entry_name {
                scan.unreadable
                    .push((name, "not an entry's name (pend-<16 hex>.json)".into()));
                continue;
            }
            match self.read(&path) {
                Ok(e) if expired(&e, now) => {
                    if sweep {
                        let _ = std::fs::remove_file(&path);
                    }
                }
                Ok(e) => scan.live.push(e),
                // A file with an entry's name that is not one is left for
                // a person to see (`pending list` names it) and counted
                // against the bounds until it is as old as an entry could
                // be, then swept.
                Err(why) => {
                    let old = std::fs::symlink_metadata(&path)
                        .and_then(|m| m.modified())
                        .is_ok_and(|t| t + TTL <= now);
                    if old && sweep {
                        let _ = std::fs::remove_file(&path);
                        continue;
                    }
                    scan.counted += 1;
                    scan.unreadable.push((name, why.to_string()));
                }
            }
        }
        scan.live
            .sort_by(|a, b| a.first_seen.cmp(&b.first_seen).then(a.id.cmp(&b.id)));
        scan.unreadable.sort();
        Ok(scan)
    }

    /// The queue as it is now, nothing removed.
    pub fn list(&self, now: SystemTime) -> Result<Listing, PendingError> {
        self.scan(now, false)
    }

    /// One live entry.
    pub fn get(&self, id: &str, now: SystemTime) -> Result<PendingApproval, PendingError> {
        if !valid_id(id) {
            return Err(PendingError::UnknownId(id.to_string()));
        }
        match self.read(&self.path_of(id)) {
            Ok(e) if !expired(&e, now) => Ok(e),
            Ok(_) => Err(PendingError::UnknownId(id.to_string())),
            Err(PendingError::Bad { .. }) if !self.path_of(id).exists() => {
                Err(PendingError::UnknownId(id.to_string()))
            }
            Err(e) => Err(e),
        }
    }

    /// Record that `asked` was refused: a new entry, or one more ask of the
    /// same entry. An approved entry asked again (its lease used up,
    /// expired or revoked) waits for a person again.
    pub fn queue(&self, asked: &Asked<'_>, now: SystemTime) -> Result<Queued, PendingError> {
        let _lock = self.lock(true)?;
        let id = id_of(asked);
        let Listing {
            live,
            counted: unreadable,
            ..
        } = self.scan(now, true)?;
        let at = rfc3339(now);
        let expires = rfc3339(now + TTL);
        if let Some(mut e) = live.iter().find(|e| e.id == id).cloned() {
            e.count = e.count.saturating_add(1);
            e.last_seen = at.clone();
            e.reason = asked.reason;
            if !e.principals.iter().any(|p| p == asked.principal)
                && e.principals.len() < MAX_PRINCIPALS
            {
                e.principals.push(asked.principal.to_string());
            }
            if e.state == PendingState::Denied {
                self.write(&e)?;
                return Ok(Queued::Denied(e));
            }
            if e.state == PendingState::Approved {
                e.state = PendingState::Pending;
                e.decided_by = None;
                e.decided_keyid = None;
                e.decided_at = None;
                e.lease_id = None;
                e.note = None;
            }
            e.expires_at = expires;
            self.write(&e)?;
            return Ok(Queued::Pending(e));
        }
        let of_goal = live.iter().filter(|e| e.goal.id == asked.goal.id).count();
        if of_goal >= MAX_PER_GOAL {
            return Ok(Queued::Full {
                limit: MAX_PER_GOAL,
            });
        }
        if live.len() + unreadable >= MAX_TOTAL {
            return Ok(Queued::Full { limit: MAX_TOTAL });
        }
        let e = PendingApproval {
            schema: PENDING_SCHEMA.into(),
            id,
            goal: asked.goal.clone(),
            workspace: asked.workspace.to_string(),
            request: asked.request.clone(),
            executable: asked.executable.clone(),
            cwd: asked.cwd.clone(),
            reason: asked.reason,
            principals: vec![asked.principal.to_string()],
            first_seen: at.clone(),
            last_seen: at,
            count: 1,
            expires_at: expires,
            state: PendingState::Pending,
            decided_by: None,
            decided_keyid: None,
            decided_at: None,
            lease_id: None,
            note: None,
        };
        let size = Self::encode(&e)?.len();
        if size > MAX_ENTRY_BYTES {
            return Ok(Queued::TooLarge { size });
        }
        self.write(&e)?;
        Ok(Queued::Pending(e))
    }

    /// A person's decision on a pending entry: approved with `lease_id`, or
    /// denied with a note. Only a pending entry can be decided.
    pub fn decide(
        &self,
        id: &str,
        decision: Decision,
        (by, keyid): (&str, &str),
        now: SystemTime,
    ) -> Result<PendingApproval, PendingError> {
        let _lock = self.lock(false)?;
        let mut e = self.get(id, now)?;
        if e.state != PendingState::Pending {
            return Err(PendingError::Decided {
                id: e.id,
                state: e.state,
            });
        }
        match decision {
            Decision::Approved { lease_id } => {
                e.state = PendingState::Approved;
                e.lease_id = Some(lease_id);
            }
            Decision::Denied { note } => {
                e.state = PendingState::Denied;
                e.note = note;
            }
        }
        e.decided_by = Some(by.to_string());
        e.decided_keyid = Some(keyid.to_string());
        e.decided_at = Some(rfc3339(now));
        e.expires_at = rfc3339(now + TTL);
        self.write(&e)?;
        Ok(e)
    }
}

/// The queue as [`Queue::list`] finds it.
#[derive(Default)]
pub struct Listing {
    /// The live entries, oldest first.
    pub live: Vec<PendingApproval>,
    /// Files that are not readable entries (name, why), so a planted or
    /// damaged file is seen.
    pub unreadable: Vec<(String, String)>,
    /// Of those, the ones with an entry's name (they count against the
    /// bounds).
    counted: usize,
}

/// A person's answer to a pending request.
pub enum Decision {
    Approved { lease_id: String },
    Denied { note: Option<String> },
}
