//! Command identity: what exactly would run, and where.
//!
//! An executable is named by the request as a string; its identity is the
//! canonical path, the symlink chain that led there, its inode metadata and
//! the SHA-256 of its whole content, all read from one open fd. A directory's
//! identity is device, inode and a creation stamp (birth time, else inode
//! generation) so that a directory removed and re-created at the same inode
//! number is still told apart. `run` recomputes both on the fds it will then
//! use (`execveat`, `fchdir`), so no path swap fits between check and use.

use std::fs::{self, File};
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use governed_model::{
    CreationStamp, DirIdentity, ExecutableIdentity, PortableIdentity, SymlinkHop,
};
use governed_sys as sys;

/// The child's PATH unless the approver sets another with `--env PATH=…`.
/// Never derived from the caller's PATH.
pub const CLEAN_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Executables larger than this are refused rather than partially hashed.
pub(crate) const DEFAULT_MAX_EXECUTABLE_BYTES: u64 = 512 * 1024 * 1024;

const MAX_SYMLINK_HOPS: usize = 40;

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("executable {0:?} not found in the child's PATH ({1})")]
    NotInPath(String, String),
    #[error("executable {path}: {source}")]
    Executable {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("executable {0} is not a regular file")]
    NotRegular(String),
    #[error("executable {0} has no execute permission")]
    NotExecutable(String),
    #[error("executable {path} is {size} bytes, over the {limit}-byte bound for hashing")]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("executable {0} changed while it was being hashed")]
    ChangedWhileHashing(String),
    #[error("executable {path}: cannot make the sealed in-memory copy that is executed: {source}")]
    Snapshot {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("too many symlinks resolving {0}")]
    SymlinkLoop(String),
    #[error("cwd {0:?} must be a relative path inside the workspace without `..`")]
    CwdShape(String),
    #[error("cwd {0:?} resolves to {1}, outside the workspace {2}")]
    CwdEscapes(String, String, String),
    #[error("directory {path}: {source}")]
    Dir {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// An executable opened read-only, with the identity computed from that fd.
pub struct OpenedExecutable {
    pub file: File,
    pub identity: ExecutableIdentity,
    /// The sealed in-memory copy whose bytes were hashed (`run` only): what
    /// is executed, so no writer of the file can change what runs.
    pub snapshot: Option<OwnedFd>,
    /// The file lies on a `noexec` mount: the kernel would refuse to execute
    /// it, and its snapshot must not be a way around that.
    pub on_noexec_mount: bool,
}

/// Whether `open_executable` only hashes the file (`approve`) or also copies
/// it into a sealed memfd while hashing (`run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Snapshot {
    HashOnly,
    Take,
}

/// An opened directory and its identity.
pub struct OpenedDir {
    pub file: File,
    pub identity: DirIdentity,
}

/// Find `requested` the way the child would: a name without `/` in
/// `path_env`, a relative path against `cwd`, an absolute path as is.
pub(crate) fn locate(
    requested: &str,
    path_env: &str,
    cwd: &Path,
) -> Result<PathBuf, IdentityError> {
    if requested.is_empty() || requested.contains('\0') {
        return Err(IdentityError::NotInPath(
            requested.to_string(),
            path_env.to_string(),
        ));
    }
    if requested.contains('/') {
        let p = Path::new(requested);
        return Ok(if p.is_absolute() {
            p.to_path_buf()
        } else {
            cwd.join(p)
        });
    }
    for dir in path_env.split(':') {
        // Relative PATH entries would depend on the cwd: never searched.
        if !dir.starts_with('/') {
            continue;
        }
        let candidate = Path::new(dir).join(requested);
        if let Ok(meta) = fs::metadata(&candidate) {
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return Ok(candidate);
            }
        }
    }
    Err(IdentityError::NotInPath(
        requested.to_string(),
        path_env.to_string(),
    ))
}

/// Follow the final component's symlinks hop by hop, recording each, and
/// return the chain with the canonical path it ends at.
pub fn symlink_chain(start: &Path) -> Result<(Vec<SymlinkHop>, PathBuf), IdentityError> {
    let io_err = |source| IdentityError::Executable {
        path: start.display().to_string(),
        source,
    };
    let mut hops = Vec::new();
    let mut cur = start.to_path_buf();
    loop {
        let meta = fs::symlink_metadata(&cur).map_err(io_err)?;
        if !meta.file_type().is_symlink() {
            break;
        }
        if hops.len() >= MAX_SYMLINK_HOPS {
            return Err(IdentityError::SymlinkLoop(start.display().to_string()));
        }
        let target = fs::read_link(&cur).map_err(io_err)?;
        let next = if target.is_absolute() {
            target.clone()
        } else {
            cur.parent().unwrap_or(Path::new("/")).join(&target)
        };
        hops.push(SymlinkHop {
            path: cur.display().to_string(),
            target: target.display().to_string(),
        });
        cur = next;
    }
    let canonical = fs::canonicalize(&cur).map_err(io_err)?;
    Ok((hops, canonical))
}

/// Resolve, open and hash the executable. Used by `approve` to bind the
/// identity and by `run` to re-check it on the fd it will exec.
///
/// The file is opened `O_NONBLOCK` and must be a regular file on the fd
/// before anything is read, so a FIFO or device planted in its place fails
/// at once instead of hanging. With [`Snapshot::Take`] the content is copied
/// into a memfd in the same pass that hashes it, and the memfd is sealed
/// (no write, grow, shrink or re-seal): the digest is the digest of the
/// bytes that will be executed, whatever happens to the file afterwards.
pub fn open_executable(
    requested: &str,
    path_env: &str,
    cwd: &Path,
    max_bytes: u64,
    snapshot: Snapshot,
) -> Result<OpenedExecutable, IdentityError> {
    let located = locate(requested, path_env, cwd)?;
    let (symlink_chain, canonical) = symlink_chain(&located)?;
    let shown = canonical.display().to_string();
    let io_err = |source| IdentityError::Executable {
        path: shown.clone(),
        source,
    };
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&canonical)
        .map_err(io_err)?;
    let before = file.metadata().map_err(io_err)?;
    if !before.is_file() {
        return Err(IdentityError::NotRegular(shown));
    }
    if before.mode() & 0o111 == 0 {
        return Err(IdentityError::NotExecutable(shown));
    }
    if before.size() > max_bytes {
        return Err(IdentityError::TooLarge {
            path: shown,
            size: before.size(),
            limit: max_bytes,
        });
    }
    let memfd = match snapshot {
        Snapshot::HashOnly => None,
        Snapshot::Take => {
            Some(
                new_snapshot(&canonical).map_err(|source| IdentityError::Snapshot {
                    path: shown.clone(),
                    source,
                })?,
            )
        }
    };
    // Read at most one byte past the size seen at open: a file that keeps
    // growing (appended or extended with holes faster than it is read) is
    // drift, never an endless read into an endless in-memory copy.
    let Some((sha256, interpreter)) =
        hash_and_copy(&file, memfd.as_ref(), before.size()).map_err(io_err)?
    else {
        return Err(IdentityError::ChangedWhileHashing(shown));
    };
    let snapshot = match memfd {
        None => None,
        Some(m) => Some(seal_snapshot(m).map_err(|source| IdentityError::Snapshot {
            path: shown.clone(),
            source,
        })?),
    };
    let on_noexec_mount = nix::sys::statvfs::fstatvfs(&file)
        .is_ok_and(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_NOEXEC));
    let after = file.metadata().map_err(io_err)?;
    let stamp = |m: &fs::Metadata| {
        (
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        )
    };
    if stamp(&before) != stamp(&after) {
        return Err(IdentityError::ChangedWhileHashing(shown));
    }
    let identity = ExecutableIdentity {
        requested: requested.to_string(),
        canonical_path: shown,
        symlink_chain,
        device: after.dev(),
        inode: after.ino(),
        size: after.size(),
        mode: after.mode(),
        mtime_ns: after.mtime() * 1_000_000_000 + after.mtime_nsec(),
        ctime_ns: after.ctime() * 1_000_000_000 + after.ctime_nsec(),
        sha256,
        interpreter,
    };
    Ok(OpenedExecutable {
        file,
        identity,
        snapshot,
        on_noexec_mount,
    })
}

/// An empty, sealable, executable memfd named after the file (the name is
/// what `/proc/PID/exe` shows: `/memfd:NAME (deleted)`).
fn new_snapshot(canonical: &Path) -> std::io::Result<File> {
    let base = canonical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // memfd names are at most 249 bytes; keep a readable prefix.
    let mut name: String = base.chars().filter(|c| *c != '\0').take(64).collect();
    if name.is_empty() {
        name.push_str("governed-exec");
    }
    let cname = std::ffi::CString::new(name).unwrap_or_default();
    if governed_fault::fail("snapshot_refused") {
        // What a kernel with `vm.memfd_noexec = 2` answers.
        return Err(std::io::Error::from_raw_os_error(libc::EACCES));
    }
    Ok(File::from(sys::memfd_for_exec(&cname)?))
}

/// Seal the filled snapshot for good and hand back a read-only fd on it
/// (re-opened through `/proc/self/fd`; the sealed read-write fd when /proc
/// is not mounted: the seals forbid writing through it either way).
fn seal_snapshot(memfd: File) -> std::io::Result<OwnedFd> {
    let fd = OwnedFd::from(memfd);
    sys::seal_for_good(&fd)?;
    let reopened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    Ok(reopened.map(OwnedFd::from).unwrap_or(fd))
}

/// SHA-256 of the whole file read through `file` from offset 0 (positioned
/// reads: the fd's offset is left alone), and the `#!` interpreter if any,
/// writing every byte hashed into `copy` as well when one is given (one
/// pass: the copy holds exactly the bytes the digest covers). `None` when
/// the file holds more than `limit` bytes by the time it is read.
///
/// A large file is hashed on a second thread while this one reads it and
/// writes the copy ([`hash_and_copy_overlapped`]): the copy then costs
/// close to nothing over the hash on a machine with two cores.
fn hash_and_copy(
    file: &File,
    copy: Option<&File>,
    limit: u64,
) -> std::io::Result<Option<(String, Option<String>)>> {
    match copy {
        Some(copy) if limit >= OVERLAP_FROM_BYTES => hash_and_copy_overlapped(file, copy, limit),
        _ => hash_and_copy_serial(file, copy, limit),
    }
}

/// Bytes read (and hashed, and copied) at a time.
const CHUNK_BYTES: usize = 1 << 20;

/// From this size on, hashing runs beside the copy: below it, starting a
/// thread costs more than the overlap saves.
const OVERLAP_FROM_BYTES: u64 = 4 << 20;

/// Read the next chunk at `offset` into `buf` (positioned: the fd's offset
/// is left alone), retrying an interrupted read. 0 at the end of the file.
fn read_chunk(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    loop {
        match file.read_at(buf, offset) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// The `#!` interpreter named by a file's first bytes, if any.
fn interpreter_of(first: &[u8]) -> Option<String> {
    first.strip_prefix(b"#!").map(|rest| {
        let line = rest.split(|b| *b == b'\n').next().unwrap_or_default();
        String::from_utf8_lossy(line).trim().to_string()
    })
}

/// Read `file` from offset 0 a chunk at a time into the buffers `buffer`
/// hands out, passing each filled buffer and its length to `chunk`. `None`
/// when the file holds more than `limit` bytes by the time it is read; else
/// its first bytes (for the `#!` line).
fn read_chunks(
    file: &File,
    limit: u64,
    mut buffer: impl FnMut() -> std::io::Result<Vec<u8>>,
    mut chunk: impl FnMut(Vec<u8>, usize) -> std::io::Result<()>,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut offset = 0u64;
    let mut first: Vec<u8> = Vec::new();
    loop {
        let mut buf = buffer()?;
        let n = read_chunk(file, &mut buf, offset)?;
        if n == 0 {
            return Ok(Some(first));
        }
        if offset == 0 {
            first.extend_from_slice(&buf[..n.min(256)]);
        }
        offset += n as u64;
        if offset > limit {
            return Ok(None);
        }
        chunk(buf, n)?;
    }
}

fn hash_and_copy_serial(
    file: &File,
    mut copy: Option<&File>,
    limit: u64,
) -> std::io::Result<Option<(String, Option<String>)>> {
    let mut hasher = Sha256::new();
    // One buffer, handed back after each chunk.
    let spare = std::cell::Cell::new(Some(vec![0u8; CHUNK_BYTES]));
    let first = read_chunks(
        file,
        limit,
        || Ok(spare.take().unwrap_or_else(|| vec![0u8; CHUNK_BYTES])),
        |buf, n| {
            hasher.update(&buf[..n]);
            if let Some(c) = copy.as_mut() {
                c.write_all(&buf[..n])?;
            }
            spare.set(Some(buf));
            Ok(())
        },
    )?;
    Ok(first.map(|first| (hex::encode(hasher.finalize()), interpreter_of(&first))))
}

/// [`hash_and_copy_serial`] with the hash on a second thread. Each chunk is
/// read once into a buffer that nobody writes until both the hasher and
/// the copy are done with it (the buffer is shared read-only, and comes
/// back for reuse only when the hasher returns the last other handle), so
/// the digest and the copy still cover exactly the same bytes, in order.
fn hash_and_copy_overlapped(
    file: &File,
    mut copy: &File,
    limit: u64,
) -> std::io::Result<Option<(String, Option<String>)>> {
    use std::sync::{mpsc, Arc};
    type Chunk = (Arc<Vec<u8>>, usize);
    const BUFFERS: usize = 3;
    let hasher_gone = || std::io::Error::other("the hashing thread stopped");
    std::thread::scope(|scope| {
        let (to_hasher, chunks) = mpsc::sync_channel::<Chunk>(BUFFERS);
        let (hashed, returned) = mpsc::channel::<Arc<Vec<u8>>>();
        let hasher = scope.spawn(move || {
            let mut hasher = Sha256::new();
            for (chunk, n) in chunks {
                hasher.update(&chunk[..n]);
                // The reader may be gone (an error): the buffer is then
                // simply dropped.
                let _ = hashed.send(chunk);
            }
            hasher.finalize()
        });
        let mut fresh = BUFFERS;
        let read = read_chunks(
            file,
            limit,
            || {
                if fresh > 0 {
                    fresh -= 1;
                    return Ok(vec![0u8; CHUNK_BYTES]);
                }
                let back = returned.recv().map_err(|_| hasher_gone())?;
                // This thread dropped its handle after writing the copy,
                // so the hasher's was the last one.
                Ok(Arc::try_unwrap(back).unwrap_or_else(|_| vec![0u8; CHUNK_BYTES]))
            },
            |buf, n| {
                let chunk = Arc::new(buf);
                to_hasher
                    .send((Arc::clone(&chunk), n))
                    .map_err(|_| hasher_gone())?;
                copy.write_all(&chunk[..n])
            },
        );
        // Closing the channel ends the hasher's loop.
        drop(to_hasher);
        let digest = hasher.join().map_err(|_| hasher_gone())?;
        Ok(read?.map(|first| (hex::encode(digest), interpreter_of(&first))))
    })
}

/// Open a directory (no symlink in the last component) and read its identity
/// from the fd.
pub fn open_dir(path: &Path) -> Result<OpenedDir, IdentityError> {
    let io_err = |source| IdentityError::Dir {
        path: path.display().to_string(),
        source,
    };
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io_err)?;
    let meta = file.metadata().map_err(io_err)?;
    let fd = file.as_raw_fd();
    let creation = sys::birth_time_ns(fd)
        .map(|value| CreationStamp {
            source: "statx_btime".into(),
            value,
        })
        .or_else(|| {
            sys::inode_generation(fd).map(|value| CreationStamp {
                source: "inode_generation".into(),
                value,
            })
        });
    let identity = DirIdentity {
        path: path.display().to_string(),
        device: meta.dev(),
        inode: meta.ino(),
        creation,
    };
    Ok(OpenedDir { file, identity })
}

/// The canonical cwd for `rel` inside `workspace` (already canonical):
/// relative, no `..`, and no symlink leading out.
pub fn resolve_cwd(workspace: &Path, rel: &str) -> Result<PathBuf, IdentityError> {
    let p = Path::new(rel);
    let bad_component = p
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if rel.is_empty() || rel.contains('\0') || bad_component {
        return Err(IdentityError::CwdShape(rel.to_string()));
    }
    let joined = workspace.join(p);
    let canonical = fs::canonicalize(&joined).map_err(|source| IdentityError::Dir {
        path: joined.display().to_string(),
        source,
    })?;
    if !canonical.starts_with(workspace) {
        return Err(IdentityError::CwdEscapes(
            rel.to_string(),
            canonical.display().to_string(),
            workspace.display().to_string(),
        ));
    }
    Ok(canonical)
}

/// Check on an opened directory fd that it lies inside `workspace`
/// (canonical): the kernel's own path of the fd, not the path we opened.
/// Returns that path.
pub(crate) fn dir_fd_inside(dir: &File, workspace: &Path) -> Result<PathBuf, CwdOutside> {
    let link = fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .map_err(CwdOutside::ReadBack)?;
    if link.starts_with(workspace) {
        Ok(link)
    } else {
        Err(CwdOutside::Outside {
            cwd: link.display().to_string(),
            workspace: workspace.display().to_string(),
        })
    }
}

/// The opened cwd is not (known to be) inside the workspace: `cwd_drift`.
#[derive(Debug, thiserror::Error)]
pub enum CwdOutside {
    #[error("cannot read back the cwd descriptor's path: {0}")]
    ReadBack(#[source] std::io::Error),
    #[error("cwd resolves to {cwd}, outside the workspace {workspace}")]
    Outside { cwd: String, workspace: String },
}

/// What a portable lease pins of an executable: its canonical path
/// relative to `workspace` when inside it (else absolute), mode, SHA-256.
pub fn portable(exe: &ExecutableIdentity, workspace: &Path) -> PortableIdentity {
    let canonical = Path::new(&exe.canonical_path);
    let (executable_path, in_workspace) = match canonical.strip_prefix(workspace) {
        Ok(rel) => (rel.display().to_string(), true),
        Err(_) => (exe.canonical_path.clone(), false),
    };
    PortableIdentity {
        executable_path,
        in_workspace,
        mode: exe.mode,
        sha256: exe.sha256.clone(),
    }
}

/// Name the first field in which two executable identities differ, with
/// the approved and the current value, and what to do about it.
pub(crate) fn executable_difference(
    want: &ExecutableIdentity,
    got: &ExecutableIdentity,
) -> Option<String> {
    let chain = |e: &ExecutableIdentity| {
        if e.symlink_chain.is_empty() {
            return "none".to_string();
        }
        e.symlink_chain
            .iter()
            .map(|h| format!("{} -> {}", h.path, h.target))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let fields: [(&str, bool, String, String); 9] = [
        (
            "canonical path",
            want.canonical_path == got.canonical_path,
            want.canonical_path.clone(),
            got.canonical_path.clone(),
        ),
        (
            "symlink chain",
            want.symlink_chain == got.symlink_chain,
            chain(want),
            chain(got),
        ),
        (
            "sha256",
            want.sha256 == got.sha256,
            want.sha256.clone(),
            got.sha256.clone(),
        ),
        (
            "device",
            want.device == got.device,
            want.device.to_string(),
            got.device.to_string(),
        ),
        (
            "inode",
            want.inode == got.inode,
            want.inode.to_string(),
            got.inode.to_string(),
        ),
        (
            "size",
            want.size == got.size,
            want.size.to_string(),
            got.size.to_string(),
        ),
        (
            "mode",
            want.mode == got.mode,
            format!("{:o}", want.mode),
            format!("{:o}", got.mode),
        ),
        (
            "mtime",
            want.mtime_ns == got.mtime_ns,
            date_ns(want.mtime_ns),
            date_ns(got.mtime_ns),
        ),
        (
            "ctime",
            want.ctime_ns == got.ctime_ns,
            date_ns(want.ctime_ns),
            date_ns(got.ctime_ns),
        ),
    ];
    // Only where the file lives and its times moved: the bytes and every
    // permission bit are the approved ones (a hard link, a touch, a copy
    // back in place).
    let metadata_only = want.canonical_path == got.canonical_path
        && want.symlink_chain == got.symlink_chain
        && want.sha256 == got.sha256
        && want.size == got.size
        && want.mode == got.mode;
    fields.iter().find(|(_, same, _, _)| !same).map(|(name, _, was, now)| {
        let advice = if metadata_only {
            format!(
                "its content is unchanged (sha256 {}, {} bytes, mode {:o}, as approved), only its metadata changed (a hard link, chown or touch changes ctime; a copy in place the inode): re-approving is safe; for a toolchain that is reinstalled or relinked, approve with --portable, which checks path, mode, size and sha256 but no inode or times",
                short(&want.sha256),
                want.size,
                want.mode & 0o7777
            )
        } else {
            "re-approve if the new file is intended".to_string()
        };
        format!(
            "executable {} changed since approval: {name} approved {was}, now {now}; {advice}",
            want.canonical_path
        )
    })
}

/// A file time in nanoseconds since the epoch as RFC 3339 (UTC).
fn date_ns(ns: i64) -> String {
    match u64::try_from(ns) {
        Ok(n) => humantime::format_rfc3339_nanos(
            std::time::UNIX_EPOCH + std::time::Duration::from_nanos(n),
        )
        .to_string(),
        Err(_) => format!("{ns} ns before the epoch"),
    }
}

/// The first 12 hex digits of a digest, as the views show one.
fn short(hex: &str) -> &str {
    hex.get(..12).unwrap_or(hex)
}

/// Name the first field in which two directory identities differ, with
/// the approved and the current value.
pub(crate) fn dir_difference(what: &str, want: &DirIdentity, got: &DirIdentity) -> Option<String> {
    let stamp = |d: &DirIdentity| {
        d.creation
            .as_ref()
            .map(|c| format!("{} {}", c.source, c.value))
            .unwrap_or_else(|| "none".into())
    };
    let fields: [(&str, bool, String, String); 3] = [
        (
            "device",
            want.device == got.device,
            want.device.to_string(),
            got.device.to_string(),
        ),
        (
            "inode",
            want.inode == got.inode,
            want.inode.to_string(),
            got.inode.to_string(),
        ),
        (
            "creation stamp (re-created)",
            want.creation == got.creation,
            stamp(want),
            stamp(got),
        ),
    ];
    fields.iter().find(|(_, same, _, _)| !same).map(|(name, _, was, now)| {
        format!(
            "{what} {} changed since approval: {name} approved {was}, now {now} (the directory was removed and made again, or another was put in its place); re-approve if that is intended",
            want.path
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn hashing_stops_one_byte_past_the_size_seen_at_open() {
        let mut f = tempfile::tempfile().expect("tempfile");
        f.write_all(b"0123456789").expect("write");
        assert!(hash_and_copy(&f, None, 5).expect("read").is_none());
        assert!(hash_and_copy(&f, None, 9).expect("read").is_none());
        let (sha, _) = hash_and_copy(&f, None, 10)
            .expect("read")
            .expect("within the limit");
        assert_eq!(sha, hex::encode(Sha256::digest(b"0123456789")));
    }

    #[test]
    fn the_copy_and_the_digest_cover_the_same_bytes_serial_or_overlapped() {
        // Sizes around the chunk and the overlap threshold, with content
        // that differs in every chunk (a reordered or reused buffer would
        // show in the digest and in the copy).
        let chunk = CHUNK_BYTES;
        let from = OVERLAP_FROM_BYTES as usize;
        for size in [
            0,
            1,
            chunk - 1,
            chunk,
            from - 1,
            from,
            from + 1,
            3 * from + 7,
        ] {
            let bytes: Vec<u8> = (0..size)
                .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3])
                .collect();
            let mut f = tempfile::tempfile().expect("tempfile");
            f.write_all(&bytes).expect("write");
            let mut copy = tempfile::tempfile().expect("copy");
            let (sha, interp) = hash_and_copy(&f, Some(&copy), size as u64)
                .expect("read")
                .expect("within the limit");
            assert_eq!(sha, hex::encode(Sha256::digest(&bytes)), "size {size}");
            assert_eq!(interp, None);
            use std::io::Seek;
            copy.rewind().expect("rewind");
            let mut back = Vec::new();
            copy.read_to_end(&mut back).expect("read copy");
            assert!(back == bytes, "copy differs at size {size}");
            // One byte short of the real size: drift, on either path.
            if size > 0 {
                let copy = tempfile::tempfile().expect("copy");
                assert!(hash_and_copy(&f, Some(&copy), size as u64 - 1)
                    .expect("read")
                    .is_none());
            }
        }
        // The interpreter line is read from the first chunk either way.
        let mut script = b"#!/bin/sh -e\n".to_vec();
        script.resize(from + 5, b'#');
        let mut f = tempfile::tempfile().expect("tempfile");
        f.write_all(&script).expect("write");
        let copy = tempfile::tempfile().expect("copy");
        let (_, interp) = hash_and_copy(&f, Some(&copy), script.len() as u64)
            .expect("read")
            .expect("within the limit");
        assert_eq!(interp.as_deref(), Some("/bin/sh -e"));
    }

    #[test]
    fn cwd_rejects_parent_and_absolute() {
        let ws = Path::new("/");
        assert!(resolve_cwd(ws, "../x").is_err());
        assert!(resolve_cwd(ws, "/etc").is_err());
        assert!(resolve_cwd(ws, "").is_err());
    }
}
