//! The child's private HOME and TMPDIR, and the sweep of those that crashed
//! runners left behind.
//!
//! Each attempt gets `BASE/governed-exec-<attempt>/{home,tmp}`, BASE being
//! the first of [`bases`] where it can be made. The
//! runner holds an exclusive `flock` on `<root>/.lock` (close-on-exec, so
//! no child inherits it) for as long as the attempt lives and removes the
//! tree when it ends. A runner killed by SIGKILL removes nothing, but the
//! kernel drops its lock; so every `run` first sweeps sibling trees whose
//! lock it can take — their runner is gone — and never touches one whose
//! lock is held. A tree is made under a `governed-exec-new-` name and
//! renamed only once its lock is held, so no sweeper sees a live tree whose
//! lock is not yet taken. A tree without a lock file (an older release's)
//! and a nursery tree whose runner died before the rename are removed once
//! they are older than a minute.
//!
//! Sweeping reads the whole base directory (a busy `/tmp` holds thousands of
//! entries), so it is not on every run's path: [`sweep_due`] lets one run
//! per state dir and minute do it, for these trees and for crashed runners'
//! cgroups alike. A leftover waits at most that minute longer. `run` sweeps
//! before it takes the Goal's journal lock, so removing a large leftover
//! never holds up other runs of the Goal.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::fcntl::{Flock, FlockArg};

/// The prefix of every attempt's scratch tree (attempt ids are `att-…`).
pub const PREFIX: &str = "governed-exec-att-";
/// A tree being created, before its lock is held.
const NURSERY: &str = "governed-exec-new-";
const LOCK_NAME: &str = ".lock";
const UNLOCKED_GRACE: Duration = Duration::from_secs(60);

/// Fresh private HOME and TMPDIR for one attempt, owned by the child's uid.
pub struct Scratch {
    pub root: PathBuf,
    pub home: PathBuf,
    pub tmp: PathBuf,
    /// Already removed (`remove`): the drop has nothing left to do.
    removed: bool,
    _lock: Flock<File>,
}

/// Where scratch trees are made, in order of preference: the caller's
/// `$TMPDIR` when set (an explicit choice is honoured); otherwise, if
/// `tmpfs_ok`, `/dev/shm` when it is a tmpfs, where making and removing the
/// directories costs microseconds instead of ~0.1 ms per `rmdir` on a disk
/// `/tmp`; then the system temp dir. `tmpfs_ok` is false for a lease with an
/// isolation option: a root runner then gives the child a fresh `/dev`
/// (and `/dev/shm`), which would hide the tree.
pub fn bases(tmpfs_ok: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if tmpfs_ok && std::env::var_os("TMPDIR").is_none_or(|d| d.is_empty()) {
        let shm = Path::new("/dev/shm");
        let tmpfs = nix::sys::statfs::statfs(shm)
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
        if tmpfs {
            out.push(shm.to_path_buf());
        }
    }
    out.push(std::env::temp_dir());
    out
}

/// Whether this run should sweep what crashed runners left (scratch trees
/// here, cgroups in `cgroup.rs`), claimed through the mtime of
/// `STATE/last-sweep`: at most one sweep per state dir and [`UNLOCKED_GRACE`].
/// A cgroup or a lock-less tree becomes removable only that long after it
/// was made anyway. If the marker cannot be read or written, the run sweeps.
pub(crate) fn sweep_due(state_dir: &Path) -> bool {
    let marker = state_dir.join("last-sweep");
    let now = SystemTime::now();
    let recent = fs::metadata(&marker)
        .and_then(|m| m.modified())
        .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age < UNLOCKED_GRACE));
    if recent {
        return false;
    }
    let _ = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&marker)
        .and_then(|f| f.set_modified(now));
    true
}

impl Scratch {
    /// Make the attempt's tree under the first of [`bases`] that takes it.
    /// (Leftovers are swept by the caller, before the journal lock.)
    ///
    /// The tree is born under a `governed-exec-new-` name, its lock taken,
    /// and only then renamed to its `governed-exec-att-` name: no sweeper
    /// ever sees a live tree whose lock is not yet held (one could take a
    /// lock file between its creation and the flock, and remove the tree).
    pub fn create(
        attempt_id: &str,
        owner: Option<(u32, u32)>,
        tmpfs_ok: bool,
    ) -> std::io::Result<Scratch> {
        let candidates = bases(tmpfs_ok);
        let name = format!("governed-exec-{attempt_id}");
        let nursery_name = format!("{NURSERY}{attempt_id}");
        let mut made = Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        for base in &candidates {
            let nursery = base.join(&nursery_name);
            made = fs::DirBuilder::new()
                .mode(0o711)
                .create(&nursery)
                .map(|()| (nursery, base.join(&name)));
            // A name that exists is never reused (it is not ours); any
            // other failure (read-only, full, no access) tries the next.
            match &made {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {}
                _ => break,
            }
        }
        let (nursery, root) = made?;
        let locked = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(nursery.join(LOCK_NAME))
            .and_then(|f| {
                Flock::lock(f, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| e.into())
            })
            .and_then(|l| fs::rename(&nursery, &root).map(|()| l));
        let lock = match locked {
            Ok(l) => l,
            Err(e) => {
                let _ = fs::remove_dir_all(&nursery);
                return Err(e);
            }
        };
        let s = Scratch {
            home: root.join("home"),
            tmp: root.join("tmp"),
            root,
            removed: false,
            _lock: lock,
        };
        for d in [&s.home, &s.tmp] {
            fs::DirBuilder::new().mode(0o700).create(d)?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::chown(d, Some(uid), Some(gid))?;
            }
        }
        Ok(s)
    }

    /// Remove the tree now, its lock still held until the drop (a sweeper
    /// never takes a tree whose runner is alive).
    pub fn remove(&mut self) {
        if !self.removed {
            let _ = fs::remove_dir_all(&self.root);
            self.removed = true;
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Removed while the lock is still held (fields drop after this).
        self.remove();
    }
}

/// Remove the scratch trees under `base` whose runner is gone.
pub fn sweep(base: &Path) {
    let Ok(rd) = fs::read_dir(base) else { return };
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // A real directory only (file_type does not follow symlinks).
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let root = entry.path();
        let gone = if name.starts_with(PREFIX) {
            runner_gone(&root)
        } else if name.starts_with(NURSERY) {
            // A runner that died in the microseconds before its rename.
            older_than_grace(&root)
        } else {
            false
        };
        if gone {
            let _ = fs::remove_dir_all(&root);
        }
    }
}

fn older_than_grace(root: &Path) -> bool {
    fs::symlink_metadata(root)
        .and_then(|m| m.modified())
        .is_ok_and(|t| SystemTime::now().duration_since(t).unwrap_or_default() > UNLOCKED_GRACE)
}

/// Whether no live runner owns the tree: its lock can be taken, or it has
/// no lock file and is older than the creation window.
fn runner_gone(root: &Path) -> bool {
    let lock_file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(root.join(LOCK_NAME));
    match lock_file {
        Ok(f) => {
            f.metadata().is_ok_and(|m| m.is_file())
                && Flock::lock(f, FlockArg::LockExclusiveNonblock).is_ok()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => older_than_grace(root),
        Err(_) => false,
    }
}
