//! What a child could reach (CONTRACT §7, last paragraph): the paths under
//! which a file is visible in this mount namespace, the capability set a
//! uid-0 child keeps when isolation is in its lease, the sockets of daemons
//! that act on a caller's behalf, and the files the runner's decisions rest
//! on beyond its key and state dir (a named ledger directory, ledger
//! credentials). `process::isolation` covers or denies what the kernel
//! lets it, and states every channel in the receipt with [`ReachEntry`]s;
//! a new channel is one more entry in one of these lists.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone)]
pub struct Mount {
    pub dev: String,
    /// The directory of the filesystem this mount shows.
    pub root: PathBuf,
    pub point: PathBuf,
    pub fstype: String,
}

/// Undo mountinfo's octal escapes (`\040` for a space, …).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Some(v) = s
                .get(i + 1..i + 4)
                .and_then(|o| u8::from_str_radix(o, 8).ok())
            {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn mounts() -> Vec<Mount> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            Some(Mount {
                dev: pre.get(2)?.to_string(),
                root: PathBuf::from(unescape(pre.get(3)?)),
                point: PathBuf::from(unescape(pre.get(4)?)),
                fstype: post.split(' ').next()?.to_string(),
            })
        })
        .collect()
}

/// Every path in this mount namespace that shows the same inode as `path`
/// (bind mounts of a directory above it, the same filesystem mounted twice),
/// `path`'s canonical form first. Hard links are not found here: callers
/// check `nlink`.
pub fn aliases(path: &Path, mounts: &[Mount]) -> std::io::Result<Vec<PathBuf>> {
    let canonical = path.canonicalize()?;
    let meta = std::fs::metadata(&canonical)?;
    let same = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino())
    };
    let mut out = vec![canonical.clone()];
    // The mount that serves the path: the deepest mount point above it,
    // the last one mounted when several share it.
    let Some(serving) = mounts
        .iter()
        .filter(|m| canonical.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count())
    else {
        return Ok(out);
    };
    let Ok(below) = canonical.strip_prefix(&serving.point) else {
        return Ok(out);
    };
    let in_fs = serving.root.join(below);
    for m in mounts.iter().filter(|m| m.dev == serving.dev) {
        if let Ok(rest) = in_fs.strip_prefix(&m.root) {
            let cand = m.point.join(rest);
            if !out.contains(&cand) && same(&cand) {
                out.push(cand);
            }
        }
    }
    Ok(out)
}

/// Capabilities (by number) a uid-0 child keeps under isolation. Each of
/// them leaves the namespaces, the cgroups, the Landlock domain, the mount
/// namespace's covers and the non-dumpable runner as they are:
/// CHOWN, DAC_OVERRIDE, FOWNER, FSETID (file ownership and modes, which uid 0
/// has over its own files anyway), KILL, SETPCAP (can only drop),
/// NET_BIND_SERVICE, NET_RAW (sockets, in whatever network namespace the
/// child has), SYS_CHROOT (a chroot does not leave a mount namespace) and
/// AUDIT_WRITE.
pub(crate) const ROOT_KEEP: &[(u32, &str)] = &[
    (0, "CAP_CHOWN"),
    (1, "CAP_DAC_OVERRIDE"),
    (3, "CAP_FOWNER"),
    (4, "CAP_FSETID"),
    (5, "CAP_KILL"),
    (8, "CAP_SETPCAP"),
    (10, "CAP_NET_BIND_SERVICE"),
    (13, "CAP_NET_RAW"),
    (18, "CAP_SYS_CHROOT"),
    (29, "CAP_AUDIT_WRITE"),
];

/// Sockets of daemons that start processes or read files for whoever
/// connects: reaching one is reaching everything its daemon can (a
/// container that copies out the runner key, processes outside every
/// witness of the run's cleanup).
pub const DAEMON_SOCKETS: &[(&str, &str)] = &[
    ("/run/docker.sock", "docker"),
    ("/var/run/docker.sock", "docker"),
    ("/run/containerd/containerd.sock", "containerd"),
    ("/run/podman/podman.sock", "podman"),
    ("/run/crio/crio.sock", "cri-o"),
    ("/run/buildkit/buildkitd.sock", "buildkit"),
    ("/run/systemd/private", "systemd"),
    ("/run/dbus/system_bus_socket", "the system D-Bus"),
    ("/run/libvirt/libvirt-sock", "libvirt"),
];

/// The same daemons run per user (rootless docker and podman, the user's
/// systemd and session bus), under `/run/user/UID`.
const USER_DAEMON_SOCKETS: &[(&str, &str)] = &[
    ("docker.sock", "rootless docker"),
    ("podman/podman.sock", "rootless podman"),
    ("systemd/private", "the user's systemd"),
    ("bus", "the user's session D-Bus"),
];

/// The daemon sockets present on this machine for a child of `uid` (and of
/// the runner's `runner_uid`), each once by its canonical path, with the
/// daemon's name; `extra` are sockets the approver named.
pub fn daemon_sockets(uid: u32, runner_uid: u32, extra: &[String]) -> Vec<(PathBuf, String)> {
    use std::os::unix::fs::FileTypeExt;
    let mut candidates: Vec<(PathBuf, String)> = DAEMON_SOCKETS
        .iter()
        .map(|(p, d)| (PathBuf::from(p), d.to_string()))
        .collect();
    let mut uids = vec![uid, runner_uid];
    uids.dedup();
    for u in uids {
        for (rel, d) in USER_DAEMON_SOCKETS {
            candidates.push((
                Path::new("/run/user").join(u.to_string()).join(rel),
                d.to_string(),
            ));
        }
    }
    candidates.extend(
        extra
            .iter()
            .map(|p| (PathBuf::from(p), "named by the approver".to_string())),
    );
    candidates.extend(listening_daemon_sockets());
    let mut out: Vec<(PathBuf, String)> = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    for (p, d) in candidates {
        // One stat (the kernel resolves the links) rules out what is not
        // there, which is most of the list on any machine; only the sockets
        // found are canonicalised, each path once (`realpath` reads every
        // component of it again).
        if seen.contains(&p) || !std::fs::metadata(&p).is_ok_and(|m| m.file_type().is_socket()) {
            continue;
        }
        seen.push(p.clone());
        let Ok(canonical) = p.canonicalize() else {
            continue;
        };
        let is_socket = std::fs::metadata(&canonical).is_ok_and(|m| m.file_type().is_socket());
        if is_socket && !out.iter().any(|(q, _)| *q == canonical) {
            out.push((canonical, d));
        }
    }
    out
}

/// Words in a listening socket's path that name a daemon of the list's kind,
/// wherever it put its socket (Docker's own containerd listens at
/// `/run/docker/containerd/containerd.sock`, not containerd's usual path).
const DAEMON_WORDS: &[(&str, &str)] = &[
    ("containerd", "containerd"),
    ("docker", "docker"),
    ("podman", "podman"),
    ("crio", "cri-o"),
    ("buildkit", "buildkit"),
    ("libvirt", "libvirt"),
];

/// Listening path sockets of this network namespace (`/proc/net/unix`,
/// flag `__SO_ACCEPTCON`) whose path names a daemon of [`DAEMON_WORDS`].
fn listening_daemon_sockets() -> Vec<(PathBuf, String)> {
    const ACCEPTCON: u32 = 0x0001_0000;
    let text = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (Some(flags), Some(path)) = (cols.get(3), cols.get(7)) else {
            continue;
        };
        let listening = u32::from_str_radix(flags, 16).is_ok_and(|f| f & ACCEPTCON != 0);
        if !listening || !path.starts_with('/') {
            continue;
        }
        let lower = path.to_ascii_lowercase();
        if let Some((_, daemon)) = DAEMON_WORDS.iter().find(|(w, _)| lower.contains(w)) {
            out.push((PathBuf::from(path), daemon.to_string()));
        }
    }
    out
}

/// Who the child is, for the kernel's permission check on a path.
#[derive(Debug, Clone)]
pub struct ChildIds {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (none after `--as-user`).
    pub groups: Vec<u32>,
    /// CAP_DAC_OVERRIDE: a uid-0 child that keeps it passes every mode check.
    pub dac_override: bool,
}

impl ChildIds {
    /// A child switched to `uid`:`gid` (`--as-user`): no supplementary
    /// groups, no capabilities.
    pub fn switched(uid: u32, gid: u32) -> ChildIds {
        ChildIds {
            uid,
            gid,
            groups: Vec::new(),
            dac_override: false,
        }
    }

    /// A child of the runner's own uid: its gid and supplementary groups,
    /// and DAC override when that uid is 0 (full root, or an isolated root
    /// child, which keeps CAP_DAC_OVERRIDE).
    pub fn runners_own() -> ChildIds {
        let uid = nix::unistd::geteuid().as_raw();
        ChildIds {
            uid,
            gid: nix::unistd::getegid().as_raw(),
            groups: nix::unistd::getgroups()
                .map(|g| g.iter().map(|g| g.as_raw()).collect())
                .unwrap_or_default(),
            dac_override: uid == 0,
        }
    }

    /// Whether mode bits `want` (r=4, w=2, x=1 of one class) are granted to
    /// the child on `meta`, as the kernel's owner/group/other check does.
    pub fn may(&self, meta: &std::fs::Metadata, want: u32) -> bool {
        if self.dac_override {
            return true;
        }
        let mode = meta.mode();
        let class = if meta.uid() == self.uid {
            mode >> 6
        } else if meta.gid() == self.gid || self.groups.contains(&meta.gid()) {
            mode >> 3
        } else {
            mode
        };
        class & want == want
    }

    pub fn describe(&self) -> String {
        format!(
            "uid {} gid {}{}",
            self.uid,
            self.gid,
            if self.groups.is_empty() {
                String::new()
            } else {
                format!(
                    " groups {}",
                    self.groups
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                )
            }
        )
    }
}

/// Whether the covers of the child's mount namespace hold: only where the
/// child cannot look at the host's mount namespace through `/proc/<pid>/root`
/// of a host process it may ptrace (one of its own uid) — with the Landlock
/// guard (no ptrace out of its domain) or a fresh `/proc` of its PID
/// namespace. An `--as-user` child has neither unless the lease asks for
/// `--pid-namespace`.
pub fn covers_hold(guard: bool, fresh_proc: bool) -> bool {
    guard || fresh_proc
}

/// Whether a daemon socket is in the child's reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketReach {
    /// `/dev/null` is bound over it in the child's mount namespace, and the
    /// cover holds ([`covers_hold`]).
    Covered,
    /// No cover (or none that holds): its modes deny the child `connect(2)`.
    Denied,
    /// No cover, and its modes let the child connect.
    Reachable,
}

/// The one rule for a daemon socket, applied by `run` (through
/// `process::isolation`), `approve` (its prediction) and `doctor`: a cover
/// that holds keeps it out; otherwise the socket's modes decide (write
/// permission is what `connect(2)` on a path socket checks). `covered` is
/// whether a cover is made over every path of it *and* holds.
pub fn socket_reach(ids: &ChildIds, covered: bool, meta: &std::fs::Metadata) -> SocketReach {
    if covered {
        SocketReach::Covered
    } else if ids.may(meta, 2) {
        SocketReach::Reachable
    } else {
        SocketReach::Denied
    }
}

/// How a path's mode and owner read in a reach entry.
pub fn mode_text(meta: &std::fs::Metadata) -> String {
    format!(
        "mode {:o}, owner {}:{}",
        meta.mode() & 0o7777,
        meta.uid(),
        meta.gid()
    )
}

pub(crate) fn root_keep_mask() -> u64 {
    ROOT_KEEP.iter().fold(0, |m, (c, _)| m | (1u64 << c))
}

pub(crate) fn root_keep_names() -> Vec<String> {
    ROOT_KEEP.iter().map(|(_, n)| n.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_decodes_octal() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape(r"/x\"), r"/x\");
    }

    #[test]
    fn the_dropped_set_includes_every_capability_that_undoes_isolation() {
        let keep = root_keep_mask();
        // SYS_ADMIN, NET_ADMIN, MKNOD, SYS_PTRACE, SYS_MODULE, SYS_RAWIO,
        // DAC_READ_SEARCH, SETUID, SETGID, SETFCAP, SYS_RESOURCE, BPF.
        for cap in [21, 12, 27, 19, 16, 17, 2, 7, 6, 31, 24, 39] {
            assert_eq!(keep & (1u64 << cap), 0, "capability {cap} kept");
        }
    }

    #[test]
    fn a_file_is_its_own_alias() {
        let d = tempfile::tempdir().expect("tempdir");
        let f = d.path().join("k");
        std::fs::write(&f, "x").expect("write");
        let a = aliases(&f, &mounts()).expect("aliases");
        assert_eq!(a[0], f.canonicalize().expect("canon"));
    }
}
