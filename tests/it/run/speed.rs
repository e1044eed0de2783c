//! What the hot-path savings must not change: the child's signal
//! state, the one receipt (signed once), where the private HOME/TMPDIR live,
//! and that crashed runners' cgroups are still swept.

use std::path::{Path, PathBuf};

use sha2::Digest;

use crate::support::*;

/// A signal the caller ignored (`SIG_IGN` survives `execve`) is back to its
/// default in the child, and nothing is blocked, though governed-exec now
/// resets only the ignored ones.
#[test]
fn a_signal_the_caller_ignored_is_default_again_in_the_child() {
    let e = Env::new();
    let probe = ["grep", "-E", "^Sig(Ign|Blk):", "/proc/self/status"];
    e.approve(&[], &probe);
    let run = e.run_cmd(&[], &probe);
    let mut argv = vec![run.get_program().to_owned()];
    argv.extend(run.get_args().map(|a| a.to_owned()));
    let o = output(
        std::process::Command::new("sh")
            .arg("-c")
            .arg("trap '' USR1 HUP PIPE TERM; exec \"$@\"")
            .arg("sh")
            .args(&argv)
            .stdin(std::process::Stdio::null()),
    );
    let r = finish_run(o);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let text = r.stdout_text().replace('\t', " ");
    assert!(
        text.contains("SigIgn: 0000000000000000"),
        "an ignored signal leaked into the child: {text}"
    );
    assert!(
        text.contains("SigBlk: 0000000000000000"),
        "a blocked signal leaked into the child: {text}"
    );
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(b))
}

/// The receipt is signed once: the copy in the state dir is byte for byte
/// the receipt printed, and the result record names its payload's digest.
#[test]
fn the_state_dir_copy_is_the_printed_receipt_and_the_result_names_it() {
    let e = Env::new();
    e.approve(&[], &["/bin/echo", "once"]);
    let r = e.run(&[], &["/bin/echo", "once"]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let attempt = r.predicate()["attempt_id"].as_str().expect("attempt id");
    let copy = std::fs::read(e.state.join("receipts").join(format!("{attempt}.json")))
        .expect("state dir copy");
    assert_eq!(
        copy, r.stdout,
        "the state dir copy differs from the printed receipt"
    );
    let env: serde_json::Value = serde_json::from_slice(&r.stdout).expect("envelope");
    use base64::Engine;
    let payload = base64::engine::general_purpose::STANDARD
        .decode(env["payload"].as_str().expect("payload"))
        .expect("base64");
    let digest = sha256_hex(&payload);
    let journal: String = std::fs::read_dir(e.state.join("journal"))
        .expect("journal dir")
        .flatten()
        .map(|f| std::fs::read_to_string(f.path()).unwrap_or_default())
        .collect();
    let result = journal
        .lines()
        .find(|l| l.contains("\"kind\":\"result\"") && l.contains(attempt))
        .expect("result record");
    assert!(
        result.contains(&format!("\"receipt_sha256\":\"{digest}\"")),
        "the result record does not name the printed receipt: {result}"
    );
}

fn is_tmpfs(p: &Path) -> bool {
    nix::sys::statfs::statfs(p).is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
}

/// Without `$TMPDIR`, the private HOME/TMPDIR live on /dev/shm (a tmpfs);
/// with it, under `$TMPDIR`, as the caller asked. Private and removed
/// either way.
#[test]
fn private_home_is_on_tmpfs_unless_the_caller_sets_tmpdir() {
    let e = Env::new();
    let probe = [
        "sh",
        "-c",
        "echo $HOME; echo $TMPDIR; stat -c %a $HOME $TMPDIR",
    ];
    e.approve(&["--uses", "2"], &probe);
    let chosen = e.path("chosen-tmp");
    std::fs::create_dir(&chosen).expect("dir");
    let mut with = e.run_cmd(&[], &probe);
    with.env("TMPDIR", &chosen);
    let with = finish_run(output(with));
    let lines: Vec<PathBuf> = with.stdout_text().lines().map(PathBuf::from).collect();
    assert!(
        lines[0].starts_with(&chosen) && lines[1].starts_with(&chosen),
        "HOME/TMPDIR not under the caller's TMPDIR {}: {:?}",
        chosen.display(),
        lines
    );
    assert_eq!(with.stdout_text().lines().nth(2), Some("700"));
    assert!(!lines[0].exists(), "HOME left behind");

    // Without TMPDIR the trees go to /dev/shm or /tmp, which a suite run
    // under a write scope (governed by governed-exec itself) cannot write.
    let writable = |d: &str| {
        let probe = Path::new(d).join(format!("ge-probe-{}", std::process::id()));
        let ok = std::fs::create_dir(&probe).is_ok();
        let _ = std::fs::remove_dir(&probe);
        ok
    };
    if !writable("/dev/shm") && !writable("/tmp") {
        skip!("neither /dev/shm nor /tmp is writable here: the default scratch bases cannot be tested");
        return;
    }
    let mut without = e.run_cmd(&[], &probe);
    without.env_remove("TMPDIR");
    let without = finish_run(output(without));
    let home = PathBuf::from(without.stdout_text().lines().next().unwrap_or(""));
    assert_eq!(without.stdout_text().lines().nth(3), Some("700"));
    assert!(!home.exists(), "HOME left behind");
    if is_tmpfs(Path::new("/dev/shm")) {
        assert!(
            home.starts_with("/dev/shm"),
            "HOME not on /dev/shm: {}",
            home.display()
        );
    } else {
        skip!("/dev/shm is not a tmpfs here: HOME was {}", home.display());
    }
}

/// Our own cgroup v2 directory, if this process can create groups in it.
fn own_v2_cgroup() -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        post.starts_with("cgroup2 ")
            .then(|| pre.split(' ').nth(4).map(PathBuf::from))
            .flatten()
    })?;
    let dir = mount.join(rel.trim_start_matches('/'));
    is_root().then_some(dir)
}

/// The stale-cgroup sweep is claimed through a marker in the state dir, at
/// most once a minute; when it is due, an old, empty group a crashed runner
/// left is removed.
#[test]
fn a_crashed_runners_cgroup_is_swept_when_the_sweep_is_due() {
    let e = Env::new();
    e.approve(&["--uses", "2"], &["/bin/true"]);
    let Some(parent) = own_v2_cgroup() else {
        skip!("not root or no cgroup v2 here: the sweep has nothing to act on");
        return;
    };
    let stale = parent.join(format!(
        "governed-exec-att-speedtest-{}",
        std::process::id()
    ));
    if std::fs::create_dir(&stale).is_err() {
        skip!("cannot create a cgroup in {}", parent.display());
        return;
    }
    let aged = std::process::Command::new("touch")
        .args(["-d", "2 hours ago"])
        .arg(&stale)
        .status()
        .is_ok_and(|s| s.success());
    assert!(aged, "could not age the stale group");
    let r = e.run(&[], &["/bin/true"]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let swept = !stale.exists();
    let _ = std::fs::remove_dir(&stale);
    assert!(swept, "the stale group {} was not swept", stale.display());

    let marker = e.state.join("last-sweep");
    let first = std::fs::metadata(&marker)
        .and_then(|m| m.modified())
        .expect("sweep marker");
    let r = e.run(&[], &["/bin/true"]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let second = std::fs::metadata(&marker)
        .and_then(|m| m.modified())
        .expect("sweep marker");
    assert_eq!(first, second, "a second run within the minute swept again");
}

/// The `executing` record is flushed after the Goal's lock is let go. A
/// runner that dies in between (the record written, visible to every other
/// runner, not yet flushed) ran nothing, and its use counts as spent: the
/// attempt is `unknown` and blocks the Goal until a person resolves it.
#[cfg(feature = "fault-injection")]
#[test]
fn a_runner_dying_between_unlock_and_flush_ran_nothing_and_spent_its_use() {
    let e = Env::new();
    let log = e.path("spawns.log");
    let probe = ["sh", "-c", &format!("echo x >> {}", log.display())];
    e.approve(&["--uses", "1"], &probe);
    let o = output(
        e.run_cmd(&[], &probe)
            .env("GOVERNED_EXEC_FAULT", "unlocked_before_flush"),
    );
    assert_eq!(o.status.code(), None, "the runner did not crash");
    assert_eq!(line_count(&log), 0, "something ran before the flush");
    assert_eq!(e.journal_executing_count(), 1);
    e.run(&[], &probe)
        .assert_refused("unresolved_unknown_outcome");
    let attempt = std::fs::read_dir(e.state.join("journal"))
        .expect("journal")
        .flatten()
        .find_map(|f| {
            let text = std::fs::read_to_string(f.path()).ok()?;
            let v: serde_json::Value = serde_json::from_str(text.lines().next()?).ok()?;
            v["event"]["attempt_id"].as_str().map(String::from)
        })
        .expect("attempt id");
    let o = output(
        cmd()
            .args([
                "resolve",
                "--attempt",
                &attempt,
                "--as",
                "failed",
                "--by",
                "t",
            ])
            .arg("--state-dir")
            .arg(&e.state),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    e.run(&[], &probe).assert_refused("lease_exhausted");
    assert_eq!(line_count(&log), 0);
}

/// A run reads only the journal's tail past its checkpoint: an edit of a
/// record before the checkpoint's head changes nothing a run decides (it
/// uses the summary the checkpoint authenticates), and `journal verify`,
/// which re-derives every record, reports the broken chain.
#[test]
fn a_run_reads_the_tail_and_journal_verify_checks_the_whole_chain() {
    let e = Env::new();
    e.approve(&["--uses", "1"], &["true"]);
    e.approve(&["--uses", "40"], &["echo", "x"]);
    assert_eq!(e.run(&[], &["true"]).code, 0);
    for _ in 0..9 {
        assert_eq!(e.run(&[], &["echo", "x"]).code, 0);
    }
    // 20 records: this open parses them all and saves a checkpoint.
    assert_eq!(e.run(&[], &["echo", "x"]).code, 0);
    assert!(
        std::fs::read_dir(e.state.join("checkpoints"))
            .expect("checkpoints")
            .flatten()
            .any(|f| f.path().extension().is_some_and(|x| x == "json")),
        "no checkpoint saved"
    );
    let journal = std::fs::read_dir(e.state.join("journal"))
        .expect("journal")
        .flatten()
        .map(|f| f.path())
        .next()
        .expect("journal file");
    let mut bytes = std::fs::read(&journal).expect("read");
    // Flip one hex digit of the first record's attempt id.
    let at = bytes
        .windows(5)
        .position(|w| w == b"\"att-")
        .expect("attempt id")
        + 5;
    bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
    std::fs::write(&journal, &bytes).expect("write");
    // The spent use of the 1-use lease is still spent.
    e.run(&[], &["true"]).assert_refused("lease_exhausted");
    assert_eq!(e.run(&[], &["echo", "x"]).code, 0);
    let o = output(
        cmd()
            .args(["journal", "verify", "--state-dir"])
            .arg(&e.state),
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}
