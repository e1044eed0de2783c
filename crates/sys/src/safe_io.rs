//! Files the runner opens or writes, made safe against whoever prepared them.
//!
//! A governed child (or anyone with write access to a directory the runner
//! uses) may plant a symlink, a FIFO or a device where the runner expects a
//! regular file. So every file the runner *reads* is opened `O_NONBLOCK`
//! (opening a FIFO never waits for a writer) and checked to be a regular
//! file on the fd before a byte is read; and every file it *writes* is a
//! fresh temporary created `O_CREAT|O_EXCL|O_NOFOLLOW` beside the target and
//! renamed over it, inside a directory opened before the child existed, so
//! a symlink, FIFO or hard link at the target is replaced, never written
//! through.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate as sys;

/// What a path turned out to be when a regular file was expected.
fn kind_of(ft: &fs::FileType) -> &'static str {
    if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else if ft.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// Fail unless the open file is a regular file (checked on the fd).
pub fn require_regular(file: &File) -> io::Result<()> {
    let ft = file.metadata()?.file_type();
    if ft.is_file() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}, not a regular file", kind_of(&ft)),
        ))
    }
}

/// Open `path` read-only without ever blocking (a FIFO, or a file under a
/// lease, answers at once) and check it is a regular file. With
/// `follow: false` a symlink in the last component is refused.
pub fn open_regular(path: &Path, follow: bool) -> io::Result<File> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)?;
    require_regular(&file)?;
    Ok(file)
}

/// Open an input file (goal, manifest, request, keys, receipt) for
/// reading, never blocking on a FIFO or device planted at a path: it must be
/// a regular file. The one exception is a pipe the caller handed over as
/// one of this process's own fds (`/dev/fd/N`, `/proc/self/fd/N`: shell
/// process substitution such as `--trust <(…)`): nobody else can have put
/// it there, and it is read to its end.
pub fn open_input(path: &Path) -> io::Result<File> {
    if !is_own_fd_path(path) {
        return open_regular(path, true);
    }
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)?;
    if !f.metadata()?.file_type().is_fifo() {
        require_regular(&f)?;
    }
    Ok(f)
}

/// Read a whole input file, refusing one larger than `max` bytes. It is
/// opened as `safe_io::open_input` does: non-blocking, and it must be a
/// regular file (a FIFO or device never blocks or streams forever), unless
/// it is the caller's own pipe (`/dev/fd/N`, process substitution).
pub fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    read_bounded_from(open_input(path)?, max)
}

/// [`read_bounded`] from a file already open (read from its offset on).
pub fn read_bounded_from(f: impl Read, max: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    f.take(max.saturating_add(1)).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than the {max}-byte bound"),
        ));
    }
    Ok(out)
}

/// `/dev/fd/N` or `/proc/self/fd/N`: a file this process already holds open.
fn is_own_fd_path(path: &Path) -> bool {
    let s = path.as_os_str().as_bytes();
    [b"/dev/fd/".as_slice(), b"/proc/self/fd/".as_slice()]
        .iter()
        .any(|p| {
            s.strip_prefix(*p)
                .is_some_and(|n| !n.is_empty() && n.iter().all(u8::is_ascii_digit))
        })
}

/// Open (creating 0600 if absent) a lock file: no symlink followed, no
/// FIFO waited on, and only a regular file accepted.
pub fn open_lock_file(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    require_regular(&file)?;
    Ok(file)
}

/// A file the runner will write later, whose directory is pinned now: the
/// directory is opened when the target is named (before any child runs), so
/// replacing a directory on the way afterwards cannot redirect the write.
pub struct WriteTarget {
    dir: File,
    name: OsString,
    shown: PathBuf,
}

impl WriteTarget {
    /// Pin the directory that will hold `path`.
    pub fn new(path: &Path) -> io::Result<WriteTarget> {
        let name = path
            .file_name()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the path names no file (it ends in `/`, `.` or `..`)",
                )
            })?
            .to_os_string();
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(parent)?;
        Ok(WriteTarget {
            dir,
            name,
            shown: path.to_path_buf(),
        })
    }

    /// The file `name` (one path component) in a directory opened earlier:
    /// nothing that happens to the directory's path since can redirect the
    /// write.
    pub fn in_dir(dir: &File, name: &OsStr, shown: PathBuf) -> io::Result<WriteTarget> {
        if name.is_empty() || name.as_bytes().contains(&b'/') || name == "." || name == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not one file name",
            ));
        }
        Ok(WriteTarget {
            dir: dir.try_clone()?,
            name: name.to_os_string(),
            shown,
        })
    }

    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// Replace the target with `bytes` durably: a fresh temporary beside it
    /// (`O_EXCL|O_NOFOLLOW`, mode `mode`), fsync, rename over the target,
    /// fsync the directory. Whatever was at the target (a symlink, a FIFO,
    /// a hard link to another file) is replaced, not written through.
    pub fn replace(&self, bytes: &[u8], mode: u32) -> io::Result<()> {
        let tmp = temp_name(&self.name);
        let mut file = sys::create_exclusive_at(&self.dir, &tmp, mode)?;
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_all())
            .and_then(|()| sys::rename_at(&self.dir, &tmp, &self.name));
        if let Err(e) = written {
            let _ = sys::unlink_at(&self.dir, &tmp);
            return Err(e);
        }
        self.dir.sync_all()
    }

    /// Create the target with `bytes`, complete or not at all, never
    /// replacing what is there: a fresh temporary (as [`Self::replace`]),
    /// fsync, then a hard link to the target name, which fails with
    /// `AlreadyExists` if anything (a file, a planted symlink) holds it.
    pub fn create_new(&self, bytes: &[u8], mode: u32) -> io::Result<()> {
        let tmp = temp_name(&self.name);
        let mut file = sys::create_exclusive_at(&self.dir, &tmp, mode)?;
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_all())
            .and_then(|()| sys::link_at(&self.dir, &tmp, &self.name));
        let _ = sys::unlink_at(&self.dir, &tmp);
        written?;
        self.dir.sync_all()
    }
}

/// `.NAME.RANDOM.tmp`: unpredictable, so nobody can plant it in advance (and
/// `O_EXCL` refuses it if they did).
fn temp_name(name: &OsStr) -> OsString {
    let mut r = [0u8; 8];
    let _ = getrandom::fill(&mut r);
    let mut t = OsString::from(".");
    t.push(name);
    t.push(format!(".{}.tmp", hex::encode(r)));
    // Keep within NAME_MAX for long target names.
    if t.as_bytes().len() > 255 {
        return OsString::from(format!(".governed-exec.{}.tmp", hex::encode(r)));
    }
    t
}

/// Replace `path` durably through a temporary beside it (see
/// [`WriteTarget::replace`]); the directory is pinned at the call.
pub fn replace_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    WriteTarget::new(path)?.replace(bytes, mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_own_fd_paths_may_be_pipes() {
        assert!(is_own_fd_path(Path::new("/dev/fd/63")));
        assert!(is_own_fd_path(Path::new("/proc/self/fd/5")));
        assert!(!is_own_fd_path(Path::new("/dev/fd/")));
        assert!(!is_own_fd_path(Path::new("/dev/fd/3/../x")));
        assert!(!is_own_fd_path(Path::new("/tmp/dev/fd/3")));
    }

    #[test]
    fn temp_names_differ_and_stay_short() {
        let a = temp_name(OsStr::new("r.json"));
        let b = temp_name(OsStr::new("r.json"));
        assert_ne!(a, b);
        let long = "x".repeat(250);
        assert!(temp_name(OsStr::new(&long)).as_bytes().len() <= 255);
    }
}

/// Why this process was denied `path`, in words a person can act on: the
/// first directory on the way it cannot enter (or the path itself it cannot
/// use), with its owner, group and mode, the uid and gid that tried, and
/// the fix. `""` for an error that is not a permission error. The text
/// starts with `"; "` so it can follow the error it explains.
pub fn permission_hint(path: &Path, e: &io::Error) -> String {
    use nix::unistd::{faccessat, AccessFlags};
    use std::os::unix::fs::MetadataExt;
    if e.kind() != io::ErrorKind::PermissionDenied {
        return String::new();
    }
    let euid = nix::unistd::geteuid().as_raw();
    let egid = nix::unistd::getegid().as_raw();
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let mut chain: Vec<&Path> = absolute.ancestors().collect();
    chain.reverse();
    // Down from `/`: each directory must let this uid enter it; the
    // deepest one that exists must also let it write (a file is made or
    // replaced there); a file at the end must let it read and write.
    let existing: Vec<(&Path, fs::Metadata)> = chain
        .iter()
        .map_while(|p| fs::metadata(p).ok().map(|m| (*p, m)))
        .collect();
    let deepest = existing.len().saturating_sub(1);
    for (i, (p, m)) in existing.iter().enumerate() {
        let checks: &[(AccessFlags, &str)] = if !m.is_dir() {
            &[(AccessFlags::R_OK, "read"), (AccessFlags::W_OK, "write")]
        } else if i == deepest {
            &[
                (AccessFlags::X_OK, "enter"),
                (AccessFlags::W_OK, "write in"),
            ]
        } else {
            &[(AccessFlags::X_OK, "enter")]
        };
        for (need, what) in checks {
            if faccessat(None, *p, *need, nix::fcntl::AtFlags::AT_EACCESS).is_err() {
                return format!(
                    "; {} is owned by uid {} gid {} with mode {:04o}, and uid {euid} (gid {egid}) cannot {what} it: make it usable by uid {euid} (`chown {euid} {}`, or a group and mode that include it), or run as uid {}",
                    p.display(),
                    m.uid(),
                    m.gid(),
                    m.mode() & 0o7777,
                    p.display(),
                    m.uid()
                );
            }
        }
    }
    format!(
        "; uid {euid} (gid {egid}) was denied {} although its owner and mode allow it: a read-only mount, an ACL or a security module (Landlock, AppArmor, SELinux) denies it",
        absolute.display()
    )
}

#[cfg(test)]
mod permission_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_non_permission_error_gets_no_hint() {
        let e = io::Error::from(io::ErrorKind::NotFound);
        assert_eq!(permission_hint(Path::new("/nonexistent/x"), &e), "");
    }

    #[test]
    fn the_hint_names_the_directory_its_owner_mode_and_the_uid() {
        if nix::unistd::geteuid().is_root() {
            // root passes every mode check: the denial must come from
            // elsewhere, and the hint says so.
            let e = io::Error::from(io::ErrorKind::PermissionDenied);
            let h = permission_hint(Path::new("/"), &e);
            assert!(h.contains("security module"), "{h}");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let locked = d.path().join("locked");
        fs::create_dir(&locked).unwrap();
        fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
        let e = io::Error::from(io::ErrorKind::PermissionDenied);
        let h = permission_hint(&locked.join("journal"), &e);
        fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        assert!(
            h.contains(&format!("{} is owned by uid", locked.display())) && h.contains("mode 0000"),
            "{h}"
        );
    }
}
