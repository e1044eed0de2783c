//! Toolchain launchers the approval summary warns about.
//!
//! The child gets a clean environment and a fresh private HOME, so a
//! launcher that finds its real program through the environment or the home
//! directory fails at run time, after a use is spent, with a misleading
//! message ("run rustup default stable"). Two common ones are recognised at
//! approve time, and the summary names the `--env` values they will need:
//!
//! - a **rustup proxy** (`cargo`, `rustc`, … resolving to the `rustup`
//!   binary by symlink or hard link): it needs `RUSTUP_HOME` (toolchains),
//!   `CARGO_HOME` (registry cache, installed tools) and a `PATH` holding the
//!   proxies, because the private HOME has no `~/.rustup` or `~/.cargo`;
//! - a **Python venv launcher** (an interpreter, or a `#!` script's
//!   interpreter, in `VENV/bin` beside `VENV/pyvenv.cfg`): it needs
//!   `PATH=VENV/bin:…` (so entry points and subprocesses find the venv) and
//!   `VIRTUAL_ENV=VENV`.
//!
//! Either way the lease pins the launcher's bytes, not the program it
//! dispatches to (the toolchain under `RUSTUP_HOME`, the venv's
//! site-packages): the warning says so.
//!
//! - a **rustup toolchain's own binary** (`RUSTUP_HOME/toolchains/NAME/bin/
//!   cargo`, the path `rustup which cargo` prints): pinned, but that cargo
//!   runs `rustc` and its subcommands by PATH, and a rustup proxy found
//!   there picks a toolchain by itself (a `rust-toolchain.toml`, the
//!   default) and may install or update one, as the clean environment has
//!   no `RUSTUP_AUTO_INSTALL=0`. The summary asks for the toolchain's `bin`
//!   first in PATH and `RUSTUP_TOOLCHAIN=NAME`, `RUSTUP_AUTO_INSTALL=0`,
//!   and says that only a write scope that leaves `RUSTUP_HOME` read-only
//!   guarantees no run changes the toolchain.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use governed_model::LeaseBody;

/// Where the executable was found before symlinks were followed.
fn found_at(b: &LeaseBody) -> PathBuf {
    let e = &b.executable;
    e.symlink_chain.first().map_or_else(
        || PathBuf::from(&e.canonical_path),
        |h| PathBuf::from(&h.path),
    )
}

/// The file is rustup itself: named so, or a hard link of a `rustup` beside
/// it (rustup installs its proxies as hard links where it can).
pub fn is_rustup(canonical: &Path, found: &Path) -> bool {
    let named = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n == "rustup" || n == "rustup-init")
    };
    if named(canonical) {
        return true;
    }
    let Ok(me) = std::fs::metadata(canonical) else {
        return false;
    };
    [canonical, found].iter().any(|p| {
        p.parent()
            .and_then(|d| std::fs::metadata(d.join("rustup")).ok())
            .is_some_and(|r| r.dev() == me.dev() && r.ino() == me.ino())
    })
}

/// `(NAME, RUSTUP_HOME/toolchains/NAME/bin)` when `p` is a binary of a
/// rustup toolchain (`…/toolchains/NAME/bin/FILE`).
pub fn toolchain_of(p: &Path) -> Option<(String, PathBuf)> {
    let bin = p.parent()?;
    let tc = bin.parent()?;
    let toolchains = tc.parent()?;
    (bin.file_name()? == "bin" && toolchains.file_name()? == "toolchains").then(|| {
        (
            tc.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            bin.to_path_buf(),
        )
    })
}

/// `VENV` when `p` is `VENV/bin/NAME` and `VENV/pyvenv.cfg` exists.
pub fn venv_of(p: &Path) -> Option<PathBuf> {
    let root = p.parent()?.parent()?;
    root.join("pyvenv.cfg")
        .is_file()
        .then(|| root.to_path_buf())
}

fn path_has(path: &str, dir: &Path) -> bool {
    path.split(':').any(|d| Path::new(d) == dir)
}

fn quote(v: &str) -> String {
    if v.bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"/._-:=+,@".contains(&c))
    {
        v.to_string()
    } else {
        format!("'{}'", v.replace('\'', r"'\''"))
    }
}

/// The approver's own value of a rustup/cargo home, as rustup finds it.
fn home_default(var: &str, dotdir: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| std::env::var("HOME").ok().map(|h| format!("{h}/{dotdir}")))
        .unwrap_or_else(|| format!("<your {var}>"))
}

/// Warnings for the approval summary, each one line (may be long; the
/// summary prints them as they are).
pub fn warnings(b: &LeaseBody) -> Vec<String> {
    let canonical = PathBuf::from(&b.executable.canonical_path);
    let found = found_at(b);
    [
        rustup_warning(b, &canonical, &found),
        toolchain_warning(b, &canonical),
        venv_warning(b, &canonical, &found),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// A rustup proxy: what the child's private HOME lacks for it, and what the
/// lease does not pin.
fn rustup_warning(b: &LeaseBody, canonical: &Path, found: &Path) -> Option<String> {
    if !is_rustup(canonical, found) {
        return None;
    }
    let e = &b.executable;
    let fixed = &b.env.fixed;
    let mut need = Vec::new();
    if let Some(dir) = found.parent().filter(|d| !path_has(&b.env.path, d)) {
        need.push(format!(
            "--env PATH={}:{}",
            quote(&dir.display().to_string()),
            b.env.path
        ));
    }
    for (var, dot) in [("RUSTUP_HOME", ".rustup"), ("CARGO_HOME", ".cargo")] {
        if !fixed.contains_key(var) {
            need.push(format!("--env {var}={}", quote(&home_default(var, dot))));
        }
    }
    let pinned = "the lease pins rustup's bytes, not the toolchain it runs (pin that by approving the path `rustup which cargo` prints, with that toolchain's bin first in PATH and RUSTUP_TOOLCHAIN set: docs/GUIDE.md, Toolchains)";
    if need.is_empty() {
        Some(format!("{} is a rustup proxy; {pinned}", e.requested))
    } else {
        Some(format!(
            "{} is a rustup proxy: the child's private HOME has no ~/.rustup or ~/.cargo, so it needs {}; {pinned}",
            e.requested,
            need.join(" ")
        ))
    }
}

/// A toolchain's own binary: what pins the rest of the toolchain it runs.
fn toolchain_warning(b: &LeaseBody, canonical: &Path) -> Option<String> {
    let (name, bin) = toolchain_of(canonical)?;
    let e = &b.executable;
    let fixed = &b.env.fixed;
    let mut need = Vec::new();
    if b.env.path.split(':').next().map(Path::new) != Some(bin.as_path()) {
        need.push(format!(
            "--env PATH={}:{}",
            quote(&bin.display().to_string()),
            b.env
                .path
                .split(':')
                .filter(|d| Path::new(d) != bin.as_path())
                .collect::<Vec<_>>()
                .join(":")
        ));
    }
    if fixed.get("RUSTUP_TOOLCHAIN").map(String::as_str) != Some(name.as_str()) {
        need.push(format!("--env RUSTUP_TOOLCHAIN={}", quote(&name)));
    }
    if fixed.get("RUSTUP_AUTO_INSTALL").map(String::as_str) != Some("0") {
        need.push("--env RUSTUP_AUTO_INSTALL=0".into());
    }
    let scope = if b.isolation.fs_write.is_some() {
        String::new()
    } else {
        "; and only a write scope (--fs-write-scope, --fs-write for cargo's home) keeps the toolchain itself read-only to the run".into()
    };
    (!need.is_empty() || !scope.is_empty()).then(|| {
        format!(
            "{} is toolchain {name}'s own binary, pinned; but it runs rustc and its subcommands by PATH, where a rustup proxy would pick, install or update a toolchain by itself: pin the whole toolchain with {}{scope}",
            e.requested,
            if need.is_empty() { "what the lease has".to_string() } else { need.join(" ") }
        )
    })
}

/// A Python venv's launcher (found, canonical, along the symlinks, or as a
/// script's interpreter): what activates the venv.
fn venv_warning(b: &LeaseBody, canonical: &Path, found: &Path) -> Option<String> {
    let e = &b.executable;
    let fixed = &b.env.fixed;
    let mut candidates = vec![found.to_path_buf(), canonical.to_path_buf()];
    candidates.extend(e.symlink_chain.iter().map(|h| PathBuf::from(&h.path)));
    if let Some(i) = &e.interpreter {
        candidates.push(PathBuf::from(i.split_whitespace().next().unwrap_or(i)));
    }
    let venv = candidates.iter().find_map(|p| venv_of(p))?;
    let bin = venv.join("bin");
    let mut need = Vec::new();
    if !path_has(&b.env.path, &bin) {
        need.push(format!(
            "--env PATH={}:{}",
            quote(&bin.display().to_string()),
            b.env.path
        ));
    }
    if !fixed.contains_key("VIRTUAL_ENV") {
        need.push(format!(
            "--env VIRTUAL_ENV={}",
            quote(&venv.display().to_string())
        ));
    }
    let pinned = "the lease pins the launcher's bytes, not the venv's packages";
    if need.is_empty() {
        Some(format!(
            "{} runs in the Python venv {}; {pinned}",
            e.requested,
            venv.display()
        ))
    } else {
        Some(format!(
            "{} runs in the Python venv {}: the child's clean environment does not activate it, so it needs {}; {pinned}",
            e.requested,
            venv.display(),
            need.join(" ")
        ))
    }
}

/// The package that owns `path`, as the system's package database says
/// (`dpkg-query -S`, then `rpm -qf`), with its version when it can say;
/// `None` when neither is installed or neither knows the file. Optional
/// information for the approver: nothing is decided on it.
pub fn owner_package(path: &Path) -> Option<String> {
    let quiet = |prog: &str, args: &[&std::ffi::OsStr]| -> Option<String> {
        let out = std::process::Command::new(prog)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .env("LC_ALL", "C")
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        let first = text.lines().next()?.trim().to_string();
        (out.status.success() && !first.is_empty()).then_some(first)
    };
    let p = path.as_os_str();
    if Path::new("/usr/bin/dpkg-query").exists() {
        // "pkg[:arch]: /usr/bin/x" (or "pkg1, pkg2: …" for a shared file).
        if let Some(pkg) = quiet("/usr/bin/dpkg-query", &["-S".as_ref(), p])
            .and_then(|l| l.split_once(": ").map(|(k, _)| k.to_string()))
        {
            let version = quiet(
                "/usr/bin/dpkg-query",
                &["-W".as_ref(), "-f=${Version}".as_ref(), pkg.as_ref()],
            );
            return Some(match version {
                Some(v) => format!("{pkg} {v} (dpkg)"),
                None => format!("{pkg} (dpkg)"),
            });
        }
    }
    if Path::new("/usr/bin/rpm").exists() {
        return quiet("/usr/bin/rpm", &["-qf".as_ref(), p]).map(|n| format!("{n} (rpm)"));
    }
    None
}

/// When the executable's bytes differ between a lease and what the same
/// request resolves to now (a package upgrade, a rebuilt tool): the old
/// and new digest, size and modification time, and the owning package
/// where the system can say. Empty when the bytes are the same.
pub fn update_lines(old: &LeaseBody, new: &LeaseBody) -> Vec<String> {
    let (o, n) = (&old.executable, &new.executable);
    if o.sha256 == n.sha256 {
        return vec![];
    }
    let when = |ns: i64| {
        u64::try_from(ns).map_or_else(
            |_| format!("{ns}ns"),
            |ns| {
                humantime::format_rfc3339_seconds(
                    std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns),
                )
                .to_string()
            },
        )
    };
    let mut lines = vec![
        format!(
            "{} changed since lease {} was approved",
            n.canonical_path, old.lease_id
        ),
        format!(
            "  old: sha256 {}, {} bytes, modified {}",
            o.sha256,
            o.size,
            when(o.mtime_ns)
        ),
        format!(
            "  new: sha256 {}, {} bytes, modified {}",
            n.sha256,
            n.size,
            when(n.mtime_ns)
        ),
    ];
    // On a merged-/usr system dpkg knows `/usr/bin/x` as `/bin/x`.
    let canonical = Path::new(&n.canonical_path);
    let unmerged = canonical
        .strip_prefix("/usr")
        .ok()
        .map(|p| Path::new("/").join(p));
    let owner = [Some(found_at(new)), Some(canonical.to_path_buf()), unmerged]
        .into_iter()
        .flatten()
        .find_map(|p| owner_package(&p));
    if let Some(pkg) = owner {
        lines.push(format!("  package: {pkg}"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn venv_is_found_by_its_pyvenv_cfg() {
        let d = std::env::temp_dir().join(format!("ge-venv-{}", std::process::id()));
        std::fs::create_dir_all(d.join("bin")).unwrap();
        std::fs::write(d.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        assert_eq!(venv_of(&d.join("bin/python")), Some(d.clone()));
        assert_eq!(venv_of(Path::new("/usr/bin/python3")), None);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn values_with_spaces_are_quoted_for_a_shell() {
        assert_eq!(quote("/a/b"), "/a/b");
        assert_eq!(quote("/a b/c'd"), r"'/a b/c'\''d'");
    }
}
