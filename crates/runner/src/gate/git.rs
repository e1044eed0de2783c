//! The workspace's git HEAD for a portable receipt (`workspace_git`), read
//! without running git, **before spawn**, from files a child of an earlier
//! run may have planted. So every read follows the runner's rules for
//! untrusted input: regular files only (a FIFO at `.git/HEAD` never hangs
//! the runner, `HEAD -> /dev/zero` is refused), opened non-blocking and
//! without following a final symlink, bounded in size, and never outside
//! the workspace (a `gitdir:` or `commondir` that leads elsewhere — say to
//! a root-only file whose hex content would be copied into the signed
//! receipt — yields no `workspace_git` at all). A git worktree whose
//! administrative dir lies outside the workspace is therefore not reported.

use std::path::{Component, Path, PathBuf};

use governed_model::GitCheckout;
use governed_sys::safe_io;

/// `HEAD`, a loose ref, `commondir`, a `.git` file: a line or two.
pub(crate) const MAX_GIT_FILE_BYTES: u64 = 64 * 1024;
/// `packed-refs` of a large repository.
pub(crate) const MAX_PACKED_REFS_BYTES: u64 = 16 * 1024 * 1024;

/// Read `path` under the rules above, if it lies inside `root` (canonical).
fn read_inside(root: &Path, path: &Path, max: u64) -> Option<String> {
    let canonical = path.canonicalize().ok()?;
    if !canonical.starts_with(root) {
        return None;
    }
    let file = safe_io::open_regular(&canonical, false).ok()?;
    let bytes = safe_io::read_bounded_from(file, max).ok()?;
    String::from_utf8(bytes).ok()
}

/// `rel` joined to `base`, unless it is absolute.
fn resolve(base: &Path, rel: &str) -> PathBuf {
    let p = Path::new(rel);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

fn is_hex(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Read a git checkout's HEAD from `workspace/.git`: `.git` as a directory
/// or a `gitdir:` file (inside the workspace), HEAD as a ref (loose under
/// the common dir, else `packed-refs`) or a detached commit.
pub fn head(workspace: &Path) -> Option<GitCheckout> {
    let root = workspace.canonicalize().ok()?;
    let dot = root.join(".git");
    let meta = std::fs::symlink_metadata(&dot).ok()?;
    let gitdir = if meta.is_dir() {
        dot
    } else {
        let text = read_inside(&root, &dot, MAX_GIT_FILE_BYTES)?;
        resolve(&root, text.trim().strip_prefix("gitdir:")?.trim())
    };
    let gitdir = gitdir
        .canonicalize()
        .ok()
        .filter(|g| g.starts_with(&root))?;
    let common = match read_inside(&root, &gitdir.join("commondir"), MAX_GIT_FILE_BYTES) {
        Some(c) => resolve(&gitdir, c.trim())
            .canonicalize()
            .ok()
            .filter(|c| c.starts_with(&root))?,
        None => gitdir.clone(),
    };
    let head = read_inside(&root, &gitdir.join("HEAD"), MAX_GIT_FILE_BYTES)?;
    let head = head.trim();
    let Some(name) = head.strip_prefix("ref:").map(str::trim) else {
        return is_hex(head).then(|| GitCheckout {
            head: head.to_string(),
            head_ref: None,
        });
    };
    let plain = Path::new(name)
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    if !name.starts_with("refs/") || !plain || name.split('/').any(str::is_empty) {
        return None;
    }
    let loose = [gitdir.join(name), common.join(name)]
        .iter()
        .find_map(|p| read_inside(&root, p, MAX_GIT_FILE_BYTES))
        .map(|s| s.trim().to_string())
        .filter(|s| is_hex(s));
    let packed = || {
        let text = read_inside(&root, &common.join("packed-refs"), MAX_PACKED_REFS_BYTES)?;
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
            .find_map(|l| {
                let (sha, r) = l.split_once(' ')?;
                (r.trim() == name && is_hex(sha)).then(|| sha.to_string())
            })
    };
    let commit = loose.or_else(packed)?;
    Some(GitCheckout {
        head: commit,
        head_ref: Some(name.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_head_reads_loose_packed_and_detached() {
        let d = tempfile::tempdir().expect("test");
        let git = d.path().join(".git");
        std::fs::create_dir_all(git.join("refs/heads")).expect("test");
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").expect("test");
        std::fs::write(
            git.join("packed-refs"),
            format!("# pack-refs\n{b} refs/heads/main\n"),
        )
        .expect("test");
        assert_eq!(head(d.path()).expect("test").head, b);
        std::fs::write(git.join("refs/heads/main"), format!("{a}\n")).expect("test");
        let h = head(d.path()).expect("test");
        assert_eq!(
            (h.head, h.head_ref.as_deref()),
            (a.clone(), Some("refs/heads/main"))
        );
        std::fs::write(git.join("HEAD"), format!("{b}\n")).expect("test");
        assert_eq!(head(d.path()).expect("test").head_ref, None);
        std::fs::write(git.join("HEAD"), "ref: refs/../../etc\n").expect("test");
        assert!(head(d.path()).is_none());
    }

    #[test]
    fn planted_fifos_devices_and_paths_out_of_the_workspace_give_nothing() {
        let d = tempfile::tempdir().expect("test");
        let ws = d.path().join("ws");
        let git = ws.join(".git");
        std::fs::create_dir_all(git.join("refs/heads")).expect("test");
        // HEAD as a FIFO: answered at once, no hang.
        nix::unistd::mkfifo(&git.join("HEAD"), nix::sys::stat::Mode::S_IRWXU).expect("test");
        assert!(head(&ws).is_none());
        std::fs::remove_file(git.join("HEAD")).expect("test");
        // HEAD -> /dev/zero: refused, not read forever.
        std::os::unix::fs::symlink("/dev/zero", git.join("HEAD")).expect("test");
        assert!(head(&ws).is_none());
        std::fs::remove_file(git.join("HEAD")).expect("test");
        // A loose ref that is a symlink to a file outside the workspace.
        let secret = d.path().join("secret");
        std::fs::write(&secret, "c".repeat(40)).expect("test");
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").expect("test");
        std::os::unix::fs::symlink(&secret, git.join("refs/heads/main")).expect("test");
        assert!(head(&ws).is_none());
        // A `gitdir:` file pointing out of the workspace.
        std::fs::remove_dir_all(&git).expect("test");
        let outside = d.path().join("outside");
        std::fs::create_dir_all(&outside).expect("test");
        std::fs::write(outside.join("HEAD"), "c".repeat(40)).expect("test");
        std::fs::write(&git, format!("gitdir: {}\n", outside.display())).expect("test");
        assert!(head(&ws).is_none());
        // An oversized HEAD.
        std::fs::remove_file(&git).expect("test");
        std::fs::create_dir_all(&git).expect("test");
        std::fs::write(
            git.join("HEAD"),
            "a".repeat(MAX_GIT_FILE_BYTES as usize + 1),
        )
        .expect("test");
        assert!(head(&ws).is_none());
    }
}
