//! Attacks on the runner itself: a writer racing the exec,
//! files planted where the runner reads or writes, huge products, hidden
//! characters in what a human reads, and leftovers of a killed runner.

use std::io::Write as _;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use crate::support::*;

/// Wait for a child at most `limit`; kill it and fail if it hangs.
fn wait_bounded(mut child: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().expect("output");
            panic!(
                "{what} hung for more than {limit:?}; stderr: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn spawn_piped(mut c: std::process::Command) -> Child {
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn governed-exec")
}

fn mkfifo(p: &Path) {
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
}

/// Watch `path` with inotify and, `delay` after the first read of it by
/// anyone, rewrite it in place (same inode: `O_TRUNC` + write) with `with`.
/// Returns a handle telling whether the rewrite happened.
fn rewrite_on_first_read(
    path: PathBuf,
    with: Vec<u8>,
    delay: Duration,
) -> std::thread::JoinHandle<bool> {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let inotify =
        Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).expect("inotify_init1");
    inotify
        .add_watch(&path, AddWatchFlags::IN_ACCESS)
        .expect("inotify_add_watch");
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match inotify.read_events() {
                Ok(events) if !events.is_empty() => break,
                _ if Instant::now() > deadline => return false,
                _ => std::thread::sleep(Duration::from_micros(50)),
            }
        }
        std::thread::sleep(delay);
        let Ok(mut f) = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
        else {
            return false;
        };
        f.write_all(&with).is_ok()
    })
}

fn copy_exe(from: &str, to: &Path) {
    std::fs::copy(from, to).expect("copy");
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn an_elf_rewritten_in_place_after_hashing_never_runs() {
    // The attacker rewrites the approved ELF (same inode) the moment the
    // runner reads it to hash it. Whatever wins the race, the program that
    // runs is the approved one, or nothing runs.
    if std::fs::canonicalize("/bin/true").ok() == std::fs::canonicalize("/bin/echo").ok() {
        skip!("an_elf_rewritten_in_place_after_hashing_never_runs: /bin/true and /bin/echo are one multi-call binary here (busybox): a copy of it under another name is no program");
        return;
    }
    let e = Env::new();
    let injected = std::fs::read("/bin/echo").expect("echo");
    let mut rewrites = 0;
    // Rewrite at once, and a little later (after the post-hash fstat, while
    // the runner journals the use and forks): some delay lands in the window.
    for (i, delay_us) in [0u64, 500, 1500, 3000, 6000].into_iter().enumerate() {
        let name = format!("tool{i}");
        let tool = e.ws.join(&name);
        copy_exe("/bin/true", &tool);
        let cmd = [format!("./{name}"), "INJECTED".to_string()];
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        e.approve(&[], &cmd);
        let watcher = rewrite_on_first_read(
            tool.clone(),
            injected.clone(),
            Duration::from_micros(delay_us),
        );
        let r = e.run(&[], &cmd);
        rewrites += usize::from(watcher.join().expect("watcher"));
        assert!(
            !r.stdout_text().contains("INJECTED"),
            "the rewritten program ran under the approved hash: {}",
            r.stdout_text()
        );
        if r.code != 125 {
            assert_eq!((r.code, r.class()), (0, "exited"), "stderr: {}", r.stderr);
            let sha = r.predicate()["command"]["sha256"].as_str().unwrap_or("");
            let approved = sha256_file("/bin/true");
            assert_eq!(sha, approved);
        } else {
            r.assert_refused("executable_drift");
        }
    }
    assert!(rewrites > 0, "the watcher never rewrote the file");
}

fn sha256_file(p: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(std::fs::read(p).expect("read")))
}

#[test]
fn a_script_rewritten_in_place_while_its_interpreter_reads_it_runs_the_approved_lines() {
    require_tool!(
        "a_script_rewritten_in_place_while_its_interpreter_reads_it_runs_the_approved_lines",
        "bash"
    );
    // bash reads a script as it goes; the script's first command rewrites
    // the file in place (same inode, same length) so that its next line
    // would print INJECTED. The interpreter reads the sealed copy that was
    // hashed, so the approved line runs.
    let e = Env::new();
    let path = e.ws.join("tool.sh");
    let original = |word: &str| {
        format!(
            "#!/bin/bash\nprintf '%s' \"$(sed 's/ORIGINAL/INJECTED/' {p})\" > {p}; :\necho {word}\n",
            p = path.display()
        )
    };
    e.write_script("tool.sh", &original("ORIGINAL"));
    e.approve(&[], &["./tool.sh"]);
    let r = e.run(&[], &["./tool.sh"]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    // The attack did happen on disk...
    assert!(std::fs::read_to_string(&path)
        .expect("read")
        .contains("echo INJECTED"));
    // ...and did not reach the interpreter.
    assert_eq!(r.stdout_text().trim(), "ORIGINAL", "stderr: {}", r.stderr);
}

#[test]
fn argv0_is_the_requested_string_and_the_program_runs_from_its_sealed_copy() {
    let e = Env::new();
    let cmd = [
        "sh",
        "-c",
        "tr '\\0' '\\n' < /proc/$$/cmdline | head -1; readlink /proc/$$/exe",
    ];
    e.approve(&[], &cmd);
    let r = e.run(&[], &cmd);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let lines: Vec<&str> = r.stdout_text().lines().collect();
    assert_eq!(lines.first(), Some(&"sh"));
    assert!(
        lines.get(1).is_some_and(|l| l.starts_with("/memfd:")),
        "exe: {lines:?}"
    );
}

#[test]
fn an_executable_on_a_noexec_mount_is_not_run_from_its_copy() {
    if !is_root() {
        skip!("mounting a noexec tmpfs needs root");
        return;
    }
    let e = Env::new();
    let mnt = e.ws.join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "noexec,size=1m", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        skip!("cannot mount a tmpfs here");
        return;
    }
    copy_exe("/bin/true", &mnt.join("t"));
    e.approve(&[], &["./mnt/t"]);
    let r = e.run(&[], &["./mnt/t"]);
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    r.assert_refused("exec_failed");
    assert!(r.stderr.contains("noexec"), "stderr: {}", r.stderr);
}

#[test]
fn an_executable_replaced_by_a_fifo_hangs_neither_run_nor_approve() {
    let e = Env::new();
    e.write_script("tool.sh", "#!/bin/sh\necho hi\n");
    e.approve(&["--uses", "3"], &["./tool.sh"]);
    let p = e.ws.join("tool.sh");
    std::fs::remove_file(&p).expect("rm");
    mkfifo(&p);
    let o = wait_bounded(
        spawn_piped(e.run_cmd(&[], &["./tool.sh"])),
        Duration::from_secs(20),
        "run of a FIFO executable",
    );
    finish_run(o).assert_refused("executable_drift");
    // A second run of the same goal is not held up by the first.
    let o = wait_bounded(
        spawn_piped(e.run_cmd(&[], &["./tool.sh"])),
        Duration::from_secs(20),
        "second run",
    );
    finish_run(o).assert_refused("executable_drift");
    let o = wait_bounded(
        spawn_piped(e.approve_cmd(&[], &["./tool.sh"])),
        Duration::from_secs(20),
        "approve of a FIFO executable",
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("tool.sh"));
}

#[test]
fn receipt_path_symlink_planted_by_the_child_is_replaced_not_followed() {
    let e = Env::new();
    let victim = e.path("victim.txt");
    std::fs::write(&victim, "precious\n").expect("victim");
    let receipt = e.ws.join("receipt.json");
    let plant = format!("ln -s {} {}", victim.display(), receipt.display());
    let cmd = ["sh", "-c", plant.as_str()];
    e.approve(&[], &cmd);
    let r = e.run(&["--receipt", receipt.to_str().expect("utf8")], &cmd);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious\n"
    );
    let meta = std::fs::symlink_metadata(&receipt).expect("receipt");
    assert!(meta.is_file(), "the receipt path is not a regular file now");
    let stmt = decode_envelope(&std::fs::read(&receipt).expect("read"));
    assert_eq!(stmt["predicate"]["outcome"]["class"], "exited");
}

#[test]
fn receipt_path_fifo_does_not_block_the_runner() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let receipt = e.path("receipt.json");
    mkfifo(&receipt);
    let o = wait_bounded(
        spawn_piped(e.run_cmd(&["--receipt", receipt.to_str().expect("utf8")], &["true"])),
        Duration::from_secs(20),
        "run with a FIFO at --receipt",
    );
    assert_eq!(o.status.code(), Some(0));
    assert!(std::fs::symlink_metadata(&receipt)
        .expect("receipt")
        .is_file());
    assert!(!std::fs::symlink_metadata(&receipt)
        .expect("receipt")
        .file_type()
        .is_fifo());
}

#[test]
fn receipt_directory_swapped_by_the_child_does_not_redirect_the_write() {
    let e = Env::new();
    let out = e.ws.join("out");
    std::fs::create_dir(&out).expect("out");
    let elsewhere = e.path("elsewhere");
    std::fs::create_dir(&elsewhere).expect("elsewhere");
    let swap = format!(
        "mv {o} {o}.old && ln -s {x} {o}",
        o = out.display(),
        x = elsewhere.display()
    );
    let cmd = ["sh", "-c", swap.as_str()];
    e.approve(&[], &cmd);
    let receipt = out.join("receipt.json");
    let r = e.run(&["--receipt", receipt.to_str().expect("utf8")], &cmd);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert!(
        !elsewhere.join("receipt.json").exists(),
        "the receipt followed the child's symlink"
    );
    assert!(e.ws.join("out.old/receipt.json").is_file());
}

#[test]
fn approve_and_revoke_never_follow_symlinks_at_the_manifest_temp_and_lock() {
    let e = Env::new();
    let victim = e.path("victim.txt");
    std::fs::write(&victim, "precious\n").expect("victim");
    let tmp = PathBuf::from(format!("{}.tmp", e.manifest.display()));
    std::os::unix::fs::symlink(&victim, &tmp).expect("symlink tmp");
    let id = e.approve(&[], &["true"]);
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious\n"
    );
    assert!(std::fs::symlink_metadata(&e.manifest)
        .expect("manifest")
        .is_file());

    // A symlink at the lock: refused, nothing created or written there.
    let lock = PathBuf::from(format!("{}.lock", e.manifest.display()));
    std::fs::remove_file(&lock).expect("rm lock");
    let target = e.path("created-through-lock");
    std::os::unix::fs::symlink(&target, &lock).expect("symlink lock");
    let o = output(&mut e.approve_cmd(&[], &["false"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("lock"));
    let o = output(
        cmd()
            .arg("revoke")
            .arg("--manifest")
            .arg(&e.manifest)
            .arg("--lease")
            .arg(&id)
            .arg("--by")
            .arg("t")
            .arg("--state-dir")
            .arg(&e.state),
    );
    assert_ne!(o.status.code(), Some(0));
    assert!(
        !target.exists(),
        "a file was created through the lock symlink"
    );

    // A FIFO at the lock fails at once instead of hanging.
    std::fs::remove_file(&lock).expect("rm lock");
    mkfifo(&lock);
    let o = wait_bounded(
        spawn_piped(e.approve_cmd(&[], &["false"])),
        Duration::from_secs(20),
        "approve with a FIFO lock",
    );
    assert_eq!(o.status.code(), Some(2));
}

/// Run `c` and return its exit code, its peak RSS in KiB and its stdout.
/// The peak is `VmHWM` of the process's own address space, sampled until
/// it exits (monotonic, so the last sample is the peak up to then); wait4's
/// `ru_maxrss` would include the forking test process's memory.
fn run_measuring_rss(mut c: std::process::Command) -> (i32, u64, String) {
    let mut child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let status_path = format!("/proc/{}/status", child.id());
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let mut peak = 0u64;
    let status = loop {
        let hwm = std::fs::read_to_string(&status_path)
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0);
        peak = peak.max(hwm);
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let text = reader.join().expect("reader");
    (status.code().unwrap_or(-1), peak, text)
}

#[test]
fn verify_contains_streams_a_huge_product_in_bounded_memory() {
    let e = Env::new();
    e.set_goal(
        r#"{ "schema": "governed-exec/goal/v1", "id": "big", "revision": 1,
  "criteria": [ { "kind": "exit_code", "equals": 0 },
                { "kind": "file", "path": "big.bin", "contains": "NEEDLE" } ] }"#,
    );
    // 1 GiB of holes, with the needle at the very end, its first bytes in
    // one read and the rest in the next.
    let cmd = [
        "sh",
        "-c",
        "truncate -s 1073741821 big.bin && printf NEEDLE >> big.bin",
    ];
    e.approve(&[], &cmd);
    let (r, receipt) = {
        let r = e.run(&[], &cmd);
        let p = e.path("r.json");
        std::fs::write(&p, &r.stdout).expect("save");
        (r, p)
    };
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let (code, rss_kib, out) = run_measuring_rss(e.verify_cmd(&receipt, &e.runner_pub()));
    assert_eq!(
        (code, out.lines().next()),
        (0, Some("VERIFIED_DONE")),
        "{out}"
    );
    assert!(
        rss_kib < 64 * 1024,
        "verify used {rss_kib} KiB of RSS for a 1 GiB product"
    );
}

#[test]
fn hidden_characters_are_escaped_in_the_summary_but_kept_in_the_lease() {
    let e = Env::new();
    // An argument that displays as "gnp.exe" reversed: U+202E flips it.
    let sneaky = "safe\u{202e}fdp.exe";
    let o = output(&mut e.approve_cmd(&[], &["echo", sneaky, "zero\u{200b}width"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = String::from_utf8_lossy(&o.stderr);
    assert!(!summary.contains('\u{202e}') && !summary.contains('\u{200b}'));
    assert!(summary.contains(r#""safe\u{202e}fdp.exe""#), "{summary}");
    assert!(summary.contains(r"zero\u{200b}width"), "{summary}");
    let manifest = std::fs::read_to_string(&e.manifest).expect("manifest");
    assert!(manifest.contains(sneaky), "the lease lost the exact bytes");
    let r = e.run(&[], &["echo", sneaky, "zero\u{200b}width"]);
    assert_eq!(
        r.code, 0,
        "the exact request no longer matches: {}",
        r.stderr
    );
}

#[test]
fn hidden_characters_are_escaped_in_journal_list_and_verify_and_errors() {
    let e = Env::new();
    e.set_goal(
        "{ \"schema\": \"governed-exec/goal/v1\", \"id\": \"g\u{2066}x\", \"revision\": 1,
  \"criteria\": [ { \"kind\": \"file\", \"path\": \"a\u{202e}b\", \"exists\": true } ] }",
    );
    e.approve(&[], &["true"]);
    let (_, receipt) = e.run_to_file("r.json", &["true"]);
    let o = output(
        cmd()
            .arg("journal")
            .arg("--state-dir")
            .arg(&e.state)
            .arg("list"),
    );
    let list = String::from_utf8_lossy(&o.stdout);
    assert!(list.contains(r"g\u{2066}x@1"), "{list}");
    assert!(!list.contains('\u{2066}'));
    let o = output(e.verify_cmd(&receipt, &e.runner_pub()));
    let v = String::from_utf8_lossy(&o.stdout);
    assert!(v.starts_with("NOT_VERIFIED"), "{v}");
    assert!(!v.contains('\u{202e}'), "{v}");
    assert!(v.contains(r"\u{202e}"), "{v}");
    // A refusal's message on stderr.
    let r = e.run(&[], &["no\u{202e}such"]);
    r.assert_refused("no_matching_lease");
    assert!(!r.stderr.contains('\u{202e}'), "{}", r.stderr);
}

fn scratch_dirs(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("governed-exec-att-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_later_run_sweeps_what_a_killed_runner_left_but_never_a_live_run() {
    let e = Env::new();
    let tmp = e.path("tmp");
    std::fs::create_dir(&tmp).expect("tmp");
    e.approve(&[], &["sleep", "30"]);
    // The killed run's attempt is `unknown` and blocks its Goal in its state
    // dir; the later runs belong to another state dir sharing the TMPDIR.
    let e2 = Env::new();
    e2.approve(&[], &["sleep", "30"]);
    e2.approve(&[], &["true"]);

    // A runner killed by SIGKILL mid-run leaves its HOME/TMPDIR behind.
    let mut c = e.run_cmd(&[], &["sleep", "30"]);
    c.env("TMPDIR", &tmp);
    let mut victim = spawn_piped(c);
    let deadline = Instant::now() + Duration::from_secs(20);
    while scratch_dirs(&tmp).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    victim.kill().expect("SIGKILL the runner");
    let _ = victim.wait();
    let left = scratch_dirs(&tmp);
    assert_eq!(left.len(), 1, "{left:?}");

    // The next run sweeps it as it starts.
    let mut live = e2.run_cmd(&[], &["sleep", "30"]);
    live.env("TMPDIR", &tmp);
    let mut live = spawn_piped(live);
    let fresh = |now: &[String]| now.iter().any(|d| !left.contains(d));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !fresh(&scratch_dirs(&tmp)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let now = scratch_dirs(&tmp);
    assert!(
        !now.contains(&left[0]),
        "the dead runner's tree is still there"
    );
    assert_eq!(now.len(), 1, "{now:?}");

    // A live run's tree (its runner holds the lock) is never swept. Sweeps
    // are rate-limited per state dir: make this run's sweep due again.
    std::fs::remove_file(e2.state.join("last-sweep")).expect("sweep marker");
    let mut c = e2.run_cmd(&[], &["true"]);
    c.env("TMPDIR", &tmp);
    let r = finish_run(output(c));
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert_eq!(scratch_dirs(&tmp), now, "a live run's tree was swept");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(live.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = live.wait();
}

#[test]
fn a_fifo_planted_at_the_goals_journal_is_refused_not_waited_on() {
    use sha2::Digest as _;
    let e = Env::new();
    e.approve(&[], &["true"]);
    let dir = e.state.join("journal");
    std::fs::create_dir_all(&dir).expect("journal dir");
    let name = &hex::encode(sha2::Sha256::digest(b"t"))[..32];
    mkfifo(&dir.join(format!("{name}.jsonl")));
    let o = wait_bounded(
        spawn_piped(e.run_cmd(&[], &["true"])),
        Duration::from_secs(20),
        "run with a FIFO journal",
    );
    finish_run(o).assert_refused("journal_unavailable");
}

#[test]
fn inputs_from_process_substitution_still_work_but_a_planted_fifo_does_not_hang() {
    require_tool!(
        "inputs_from_process_substitution_still_work_but_a_planted_fifo_does_not_hang",
        "bash"
    );
    let e = Env::new();
    e.approve(&[], &["true"]);
    // `--goal <(cat goal.json) --trust <(cat approver.pub)`: the caller's own
    // pipes, read to their end.
    let line = format!(
        "exec {bin} run --goal <(cat {g}) --manifest {m} --trust <(cat {t}) --state-dir {s} -- true",
        bin = BIN,
        g = e.goal.display(),
        m = e.manifest.display(),
        t = e.trust.display(),
        s = e.state.display()
    );
    let r = finish_run(output(
        std::process::Command::new("bash").args(["-c", &line]),
    ));
    assert_eq!((r.code, r.class()), (0, "exited"), "stderr: {}", r.stderr);
    // A FIFO planted at the goal's path is refused at once.
    let planted = e.path("planted-goal.json");
    mkfifo(&planted);
    let mut c = e.run_cmd(&[], &["true"]);
    let args: Vec<std::ffi::OsString> = c
        .get_args()
        .map(|a| {
            if a == e.goal.as_os_str() {
                planted.clone().into_os_string()
            } else {
                a.to_os_string()
            }
        })
        .collect();
    c = cmd();
    c.args(args);
    let o = wait_bounded(
        spawn_piped(c),
        Duration::from_secs(20),
        "run with a FIFO goal",
    );
    let r = finish_run(o);
    r.assert_refused("invalid_input");
    assert!(r.stderr.contains("FIFO"), "{}", r.stderr);
}

#[test]
fn an_executable_that_keeps_growing_is_drift_not_an_endless_copy() {
    // A writer extends the approved file with holes far faster than anyone
    // can read it. Whether the runner sees it already too large at open or
    // growing while it reads (it reads at most one byte past the size seen at
    // open; unit-tested in identity.rs), the run ends at once as drift.
    let e = Env::new();
    e.write_script("tool.sh", "#!/bin/sh\necho hi\n");
    e.approve(&[], &["./tool.sh"]);
    let p = e.ws.join("tool.sh");
    // The writer: holes of 64 MiB, one after another, until told to stop
    // (a thread, not `truncate -s +64M`, which busybox does not have).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let grower = {
        let (p, stop) = (p.clone(), stop.clone());
        std::thread::spawn(move || {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .expect("tool.sh");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                if f.set_len(len + (64 << 20)).is_err() {
                    return;
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let o = wait_bounded(
        spawn_piped(e.run_cmd(&[], &["./tool.sh"])),
        Duration::from_secs(30),
        "run of a growing executable",
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = grower.join();
    finish_run(o).assert_refused("executable_drift");
}

#[test]
fn a_big_script_rewritten_while_it_is_hashed_and_copied_runs_the_approved_bytes_or_nothing() {
    // Above a few MiB the runner hashes on one thread while another copies
    // the same buffers into the sealed memfd. A writer rewrites the file in
    // place (same inode, same length) at several moments of that pass; the
    // line that matters sits at the very end, in the last chunk read.
    let e = Env::new();
    let script = |word: &str| {
        let mut body = b"#!/bin/sh\n".to_vec();
        let filler = "# filler line of the big approved script\n";
        while body.len() < (9 << 20) {
            body.extend_from_slice(filler.as_bytes());
        }
        body.extend_from_slice(format!("echo {word}\n").as_bytes());
        body
    };
    let approved = script("ORIGINAL");
    let mut rewrites = 0;
    let mut outcomes = Vec::new();
    for (i, delay_us) in [0u64, 2000, 8000, 20000].into_iter().enumerate() {
        let name = format!("big{i}.sh");
        let path = e.ws.join(&name);
        std::fs::write(&path, &approved).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let cmd = [format!("./{name}")];
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        e.approve(&[], &cmd);
        let watcher = rewrite_on_first_read(
            path.clone(),
            script("INJECTED"),
            Duration::from_micros(delay_us),
        );
        let r = e.run(&[], &cmd);
        rewrites += usize::from(watcher.join().expect("watcher"));
        outcomes.push(r.code);
        assert!(
            !r.stdout_text().contains("INJECTED"),
            "the rewritten script ran under the approved hash"
        );
        if r.code == 125 {
            r.assert_refused("executable_drift");
        } else {
            assert_eq!((r.code, r.class()), (0, "exited"), "stderr: {}", r.stderr);
            assert_eq!(r.stdout_text().trim(), "ORIGINAL");
            use sha2::Digest as _;
            let want = hex::encode(sha2::Sha256::digest(&approved));
            assert_eq!(
                r.predicate()["command"]["sha256"].as_str(),
                Some(want.as_str())
            );
        }
    }
    assert!(rewrites > 0, "the watcher never rewrote the file");
    eprintln!("exit codes by delay: {outcomes:?}");
}

/// keygen and the runner's first key write never write through a planted
/// symlink: the `.pub` is the trust anchor a verifier reads, and its
/// temporary (once `PREFIX.pub.tmp<PID>`, predictable) was followed.
#[test]
fn keygen_and_the_runner_key_never_write_through_planted_symlinks() {
    let d = tempfile::tempdir().expect("tempdir");
    let victim = d.path().join("victim");
    std::fs::write(&victim, "untouched\n").expect("victim");
    let prefix = d.path().join("k");
    // Every temporary name the old code would use for the next pids, and
    // the public key's own name.
    let here = std::process::id();
    for pid in here..here + 200 {
        let _ = std::os::unix::fs::symlink(&victim, d.path().join(format!("k.pub.tmp{pid}")));
    }
    std::os::unix::fs::symlink(&victim, d.path().join("k.pub")).expect("plant");
    let o = output(cmd().arg("keygen").arg("--out").arg(&prefix));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "untouched\n"
    );
    let pub_path = d.path().join("k.pub");
    let meta = std::fs::symlink_metadata(&pub_path).expect("k.pub");
    assert!(meta.file_type().is_file(), "k.pub is still a symlink");
    assert!(std::fs::read_to_string(&pub_path)
        .expect("pub")
        .contains("BEGIN PUBLIC KEY"));

    // The runner's own key pair, made on first use in the state dir.
    let e = Env::new();
    std::fs::create_dir_all(&e.state).expect("state");
    std::os::unix::fs::symlink(&victim, e.state.join("runner.pub")).expect("plant");
    e.approve(&[], &["true"]);
    let r = e.run(&[], &["true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "untouched\n"
    );
    assert!(std::fs::symlink_metadata(e.runner_pub())
        .expect("runner.pub")
        .file_type()
        .is_file());
}

/// `--as-user 4294967295` is `(uid_t)-1`: "leave unchanged" to the kernel,
/// so the child stayed uid 0 while the summary named 4294967295. Refused at approve, naming the value.
#[test]
fn as_user_minus_one_is_refused_at_approve() {
    let e = Env::new();
    for spec in ["4294967295", "1000:4294967295", "4294967295:0"] {
        let o = output(e.approve_cmd(&["--as-user", spec], &["true"]));
        assert_eq!(o.status.code(), Some(2), "{spec}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("4294967295") && err.contains("--as-user"),
            "{err}"
        );
    }
    assert!(!e.manifest.exists(), "nothing written");
}

/// A newline in a directory or file name added forged lines to the approval
/// summary: only argv went through the escaping.
#[test]
fn a_newline_in_a_file_or_directory_name_adds_no_line_to_the_summary() {
    let e = Env::new();
    let forged = "d\n  sha256        0000forged";
    let dir = e.ws.join(forged);
    std::fs::create_dir(&dir).expect("dir");
    let script = dir.join("s\n  warning       none.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let exe = script.display().to_string();
    let o = output(e.approve_cmd(&["--cwd", forged], &[exe.as_str()]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = String::from_utf8_lossy(&o.stderr);
    for l in summary.lines() {
        let t = l.trim_start();
        assert!(
            !t.starts_with("sha256        0000forged") && !t.starts_with("warning       none.sh"),
            "a name forged a summary line: {l:?}\n{summary}"
        );
    }
    assert!(summary.contains(r"d\n  sha256"), "{summary}");
}

/// The sealed copy is executable by anyone: an `--as-user` child ran a
/// 0700 root-only program (and could read its bytes) that its uid could
/// never run itself.
#[test]
fn an_as_user_child_runs_only_what_its_uid_could_run() {
    if !is_root() {
        skip!("an_as_user_child_runs_only_what_its_uid_could_run: needs root (CI runs as root)");
        return;
    }
    let e = Env::new();
    std::fs::set_permissions(e.dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for (name, mode) in [("private", 0o700), ("public", 0o755)] {
        std::fs::copy("/bin/true", e.ws.join(name)).expect("copy");
        std::fs::set_permissions(e.ws.join(name), std::fs::Permissions::from_mode(mode))
            .expect("chmod");
        e.approve(&["--as-user", "65534"], &[&format!("./{name}")]);
    }
    let r = e.run(&[], &["./private"]);
    r.assert_refused("exec_failed");
    assert!(r.stderr.contains("--as-user 65534"), "{}", r.stderr);
    assert_eq!(e.journal_executing_count(), 0, "nothing spent");
    let r = e.run(&[], &["./public"]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
    assert_eq!(r.code, 0);
}

/// `approve --file F --check --format markdown` is what a reviewer reads in a
/// pull request: no value of the reviewed file may change how that table
/// renders. An HTML `<details>` in an env value would fold the next change
/// (`isolation.no_network: true → false`) out of sight; a `|`, a backtick, a
/// newline or a leading `#` would forge cells, rows or headings; a Cyrillic
/// `а` for a Latin `a` would make a change look like none.
#[test]
fn a_reviewed_file_cannot_change_how_the_check_table_renders() {
    let e = Env::new();
    let head = "goal = \"goal.json\"\nworkspace = \"ws\"\nttl = \"1h\"\n";
    let entry = |note: &str, mode: &str, no_network: bool| {
        format!(
            "{head}\n[[command]]\nname = \"tweak\"\nrun = [\"echo\", \"tweak\"]\nno_network = {no_network}\nenv = {{ A_NOTE = {note}, MODE = {mode} }}\n"
        )
    };
    let before = e.path("before.toml");
    std::fs::write(&before, entry("\"plain\"", "\"a\"", true)).unwrap();
    let mut c = cmd();
    c.arg("approve")
        .arg("--file")
        .arg(&before)
        .arg("--manifest")
        .arg(&e.manifest)
        .arg("--approver")
        .arg("alice")
        .arg("--key")
        .arg(&e.key);
    let o = output(c);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let after = e.path("after.toml");
    let mut text = entry(
        "\"<details><summary>cosmetic rename only</summary>\"",
        "\"\u{430}\"",
        false,
    );
    text.push_str(
        "\n[[command]]\nname = \"#evil <img src=x> | `tick` \\n| forged | row | | | |\"\nrun = [\"echo\", \"a|b\", \"`x`\", \"<script>\", \"\\n# heading\"]\n",
    );
    std::fs::write(&after, text).unwrap();
    let mut c = cmd();
    c.arg("approve")
        .arg("--file")
        .arg(&after)
        .arg("--manifest")
        .arg(&e.manifest)
        .arg("--check")
        .arg("--format")
        .arg("markdown");
    let o = output(c);
    let md = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{md}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The only HTML is the view's own line breaks inside a cell.
    assert!(!md.replace("<br>", "").contains('<'), "{md}");
    let lines: Vec<&str> = md.lines().collect();
    assert!(lines[0].starts_with("### Approvals: differ"), "{md}");
    let unescaped = |l: &str, want: char| {
        let b: Vec<char> = l.chars().collect();
        (0..b.len())
            .filter(|&i| {
                b[i] == want && {
                    let slashes = b[..i].iter().rev().take_while(|c| **c == '\\').count();
                    slashes % 2 == 0
                }
            })
            .count()
    };
    for l in &lines[1..] {
        assert!(
            l.is_empty() || l.starts_with('|'),
            "a line outside the table: {l:?}\n{md}"
        );
    }
    for l in &lines {
        assert_eq!(unescaped(l, '`'), 0, "a backtick the file chose: {l:?}");
    }
    let rows: Vec<&&str> = lines.iter().filter(|l| l.starts_with('|')).collect();
    // Header, separator, the changed entry, the new entry: nothing more.
    assert_eq!(rows.len(), 4, "{md}");
    for r in &rows {
        assert_eq!(unescaped(r, '|'), 6, "a cell the file chose: {r:?}");
    }
    let changed = rows
        .iter()
        .find(|r| r.starts_with("| changed |"))
        .unwrap_or_else(|| panic!("{md}"));
    assert!(changed.contains("true → false"), "{changed}");
    assert!(changed.contains("no\\_network"), "{changed}");
    // The homoglyph is shown as what it is.
    assert!(changed.contains("\\u{430}"), "{changed}");
    assert!(!md.contains('\u{430}'), "{md}");
}
