//! The approval summary warns when the executable is a launcher that finds
//! its real program through an environment the child will not have: a
//! rustup proxy, or a Python venv's interpreter or entry point.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use crate::support::*;

fn summary(e: &Env, flags: &[&str], command: &[&str]) -> String {
    let o = output(&mut e.approve_cmd(flags, command));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    err
}

fn warnings(summary: &str) -> Vec<&str> {
    summary
        .lines()
        .filter(|l| l.trim_start().starts_with("warning"))
        .collect()
}

fn executable(p: &Path, body: &str) {
    std::fs::write(p, body).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_rustup_proxy_by_symlink_or_hard_link_is_named_with_the_env_it_needs() {
    let e = Env::new();
    let bin = e.path("cargo-home/bin");
    std::fs::create_dir_all(&bin).unwrap();
    executable(&bin.join("rustup"), "#!/bin/sh\necho rustup\n");
    symlink("rustup", bin.join("cargo")).unwrap();
    std::fs::hard_link(bin.join("rustup"), bin.join("rustc")).unwrap();
    let path = format!("PATH={}:/usr/bin:/bin", bin.display());
    for proxy in ["cargo", "rustc"] {
        let s = summary(&e, &["--env", &path], &[proxy, "test"]);
        let w = warnings(&s).join("\n");
        assert!(w.contains(&format!("{proxy} is a rustup proxy")), "{s}");
        assert!(
            w.contains("--env RUSTUP_HOME=") && w.contains("--env CARGO_HOME="),
            "{s}"
        );
        // PATH already holds the proxies: not asked for again.
        assert!(!w.contains("--env PATH="), "{s}");
        assert!(w.contains("rustup which"), "{s}");
    }
    // With the recipe in the lease, only the note about what is pinned stays.
    let s = summary(
        &e,
        &[
            "--env",
            &path,
            "--env",
            "RUSTUP_HOME=/r",
            "--env",
            "CARGO_HOME=/c",
        ],
        &["cargo", "build"],
    );
    let w = warnings(&s).join("\n");
    assert!(w.contains("cargo is a rustup proxy;"), "{s}");
    assert!(!w.contains("--env"), "{s}");
    // An absolute path to the proxy outside the lease's PATH: PATH is named.
    let s = summary(&e, &[], &[bin.join("cargo").to_str().unwrap(), "fmt"]);
    assert!(
        warnings(&s)
            .join("\n")
            .contains(&format!("--env PATH={}:", bin.display())),
        "{s}"
    );
    // An ordinary program gets no such warning.
    let s = summary(&e, &[], &["true"]);
    assert!(!s.contains("rustup") && !s.contains("venv"), "{s}");
}

#[test]
fn a_venv_interpreter_or_entry_point_is_named_with_the_env_it_needs() {
    let e = Env::new();
    let venv = e.path("proj/.venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    // The interpreter is a symlink to a base interpreter outside the venv.
    let base = e.path("base-python");
    executable(&base, "#!/bin/sh\nexit 0\n");
    symlink(&base, venv.join("bin/python")).unwrap();
    // An entry point: a `#!` script whose interpreter is the venv's python.
    executable(
        &venv.join("bin/pytest"),
        &format!("#!{}\nimport sys\n", venv.join("bin/python").display()),
    );
    for exe in ["python", "pytest"] {
        let p = venv.join("bin").join(exe);
        let s = summary(&e, &[], &[p.to_str().unwrap(), "-q"]);
        let w = warnings(&s).join("\n");
        assert!(
            w.contains(&format!("runs in the Python venv {}", venv.display())),
            "{s}"
        );
        assert!(
            w.contains(&format!("--env PATH={}/bin:", venv.display()))
                && w.contains(&format!("--env VIRTUAL_ENV={}", venv.display())),
            "{s}"
        );
        assert!(w.contains("not the venv's packages"), "{s}");
    }
    let s = summary(
        &e,
        &[
            "--env",
            &format!("PATH={}/bin:/usr/bin:/bin", venv.display()),
            "--env",
            &format!("VIRTUAL_ENV={}", venv.display()),
        ],
        &["python", "-V"],
    );
    let w = warnings(&s).join("\n");
    assert!(w.contains("runs in the Python venv"), "{s}");
    assert!(!w.contains("--env"), "{s}");
}

#[test]
fn a_toolchains_own_cargo_is_asked_for_the_whole_pinned_toolchain() {
    let e = Env::new();
    let bin = e.path("rustup-home/toolchains/1.85.0-x86_64-unknown-linux-gnu/bin");
    std::fs::create_dir_all(&bin).unwrap();
    executable(&bin.join("cargo"), "#!/bin/sh\necho cargo\n");
    let cargo = bin.join("cargo");
    let s = summary(&e, &[], &[cargo.to_str().unwrap(), "test"]);
    let w = warnings(&s).join("\n");
    assert!(
        w.contains("is toolchain 1.85.0-x86_64-unknown-linux-gnu's own binary")
            && w.contains(&format!("--env PATH={}:/usr/local/sbin", bin.display()))
            && w.contains("--env RUSTUP_TOOLCHAIN=1.85.0-x86_64-unknown-linux-gnu")
            && w.contains("--env RUSTUP_AUTO_INSTALL=0")
            && w.contains("--fs-write-scope"),
        "{s}"
    );
    // The recipe in the lease, with a write scope: nothing left to say.
    let path = format!("PATH={}:/usr/bin:/bin", bin.display());
    let s = summary(
        &e,
        &[
            "--env",
            &path,
            "--env",
            "RUSTUP_TOOLCHAIN=1.85.0-x86_64-unknown-linux-gnu",
            "--env",
            "RUSTUP_AUTO_INSTALL=0",
            "--fs-write-scope",
        ],
        &[cargo.to_str().unwrap(), "test"],
    );
    assert!(!s.contains("own binary"), "{s}");
    // The toolchain's bin present but not first: a proxy earlier in PATH
    // would still answer `rustc`.
    let late = format!("PATH=/usr/bin:{}", bin.display());
    let s = summary(
        &e,
        &[
            "--env",
            &late,
            "--env",
            "RUSTUP_TOOLCHAIN=1.85.0-x86_64-unknown-linux-gnu",
            "--env",
            "RUSTUP_AUTO_INSTALL=0",
            "--fs-write-scope",
        ],
        &[cargo.to_str().unwrap(), "test"],
    );
    assert!(
        s.contains(&format!("--env PATH={}:/usr/bin", bin.display())),
        "{s}"
    );
}
