//! CONTRACT §9 (v1.2): `--memory` through the run's memory cgroup, the
//! OOM kill of the main process as `memory_limit_reaped` (121), and the
//! whole run's resources measured from its cgroups, with a Goal criterion
//! on them. The children are python3 one-liners; what needs a kernel
//! mechanism this machine lacks says SKIP loudly.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::*;

const MIB: u64 = 1024 * 1024;

/// The check `name` of `doctor --json`, run as `wrap` makes it (or as is).
fn doctor_check_of(wrap: Option<&dyn Fn(&Command) -> Command>, name: &str) -> Value {
    let c = doctor_cmd();
    let d = doctor_report(match wrap {
        Some(wrap) => output(wrap(&c)),
        None => output(c),
    });
    doctor_check(&d, name).clone()
}

/// The memory cgroup mechanism `run` will use here, or SKIP with doctor's
/// reason.
fn memory_cgroup(test: &str) -> Option<String> {
    if !is_root() {
        skip!("{test}: needs root to make a per-run memory cgroup");
        return None;
    }
    let c = doctor_check_of(None, "memory");
    match c["mechanism"].as_str() {
        Some(m) if m.starts_with("memory_cgroup_") => Some(m.to_string()),
        _ => {
            skip!("{test}: no memory cgroup here: {}", c["detail"]);
            None
        }
    }
}

fn resources(r: &Run) -> &Value {
    &r.predicate()["resources"]
}

/// Approve `probe` with `flags`, run it, and return the run.
fn approve_and_run(e: &Env, flags: &[&str], probe: &[&str]) -> Run {
    e.approve(flags, probe);
    e.run(&[], probe)
}

#[test]
fn a_64_gib_prot_none_reservation_using_50_mib_runs_under_a_512_mib_memory_cgroup() {
    let Some(mech) = memory_cgroup(
        "a_64_gib_prot_none_reservation_using_50_mib_runs_under_a_512_mib_memory_cgroup",
    ) else {
        return;
    };
    let e = Env::new();
    // What a JVM or V8 does: reserve far more address space than it uses.
    let probe = [
        "python3",
        "-c",
        "import mmap; m = mmap.mmap(-1, 64 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=0); b = b'x' * (50 << 20); print('reserved', len(m), 'touched', len(b))",
    ];
    let r = approve_and_run(&e, &["--memory", "512MiB"], &probe);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    assert!(
        r.stdout_text()
            .contains("reserved 68719476736 touched 52428800"),
        "{}",
        r.stdout_text()
    );
    let p = r.predicate();
    assert_eq!(p["isolation"]["memory_limit"], mech.as_str());
    // A uid-0 child with every capability could move itself out.
    assert_eq!(p["isolation"]["memory_limit_evadable"], true);
    let res = resources(&r);
    let peak = res["peak_memory_bytes"].as_u64().expect("peak memory");
    assert!((50 * MIB..512 * MIB).contains(&peak), "{res}");
    assert_eq!(res["oom_kills"], 0, "{res}");
    let fit = &res["fit"]["memory_bytes"];
    assert_eq!(fit["limit"], 512 * MIB, "{fit}");
    assert_eq!(fit["used"], peak);

    // The views carry the resources table.
    let receipt = e.path("r.json");
    std::fs::write(&receipt, &r.stdout).unwrap();
    for (format, needle) in [("text", "peak memory"), ("markdown", "| fit memory |")] {
        let o = output(
            cmd()
                .args(["receipt", "show", "--format", format])
                .arg(&receipt),
        );
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains(needle), "{format}: {text}");
        assert!(text.contains("of 512.0 MiB"), "{format}: {text}");
    }
}

#[test]
fn touching_600_mib_under_512_mib_is_memory_limit_reaped_121_and_the_rest_is_gone() {
    if memory_cgroup(
        "touching_600_mib_under_512_mib_is_memory_limit_reaped_121_and_the_rest_is_gone",
    )
    .is_none()
    {
        return;
    }
    let e = Env::new();
    let pidfile = e.path("sleeper.pid");
    let script = format!(
        "import subprocess; s = subprocess.Popen(['sleep', '1000']); open({:?}, 'w').write(str(s.pid)); b = b'x' * (600 << 20); print('survived')",
        pidfile.display().to_string()
    );
    let probe = ["python3", "-c", script.as_str()];
    let r = approve_and_run(&e, &["--memory", "512MiB"], &probe);
    assert_eq!(r.code, 121, "{}", r.stderr);
    assert_eq!(r.class(), "memory_limit_reaped", "{}", r.predicate());
    assert_eq!(r.outcome()["signal"], 9);
    assert_eq!(r.outcome()["runner_exit_code"], 121);
    assert!(!r.stdout_text().contains("survived"));
    let p = r.predicate();
    assert_eq!(p["cleanup"]["state"], "gone", "{}", p["cleanup"]);
    assert!(
        p["cleanup"]["leftover_processes_killed"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    );
    let sleeper = read_pid(&pidfile);
    assert!(
        !pid_alive(sleeper),
        "the sleeper {sleeper} outlived the run"
    );
    assert!(resources(&r)["oom_kills"].as_u64().unwrap_or(0) >= 1);
}

#[test]
fn an_oom_kill_of_another_process_is_counted_and_the_outcome_stays() {
    if memory_cgroup("an_oom_kill_of_another_process_is_counted_and_the_outcome_stays").is_none() {
        return;
    }
    let e = Env::new();
    let probe = [
        "sh",
        "-c",
        "python3 -c \"b = b'x' * (600 << 20)\"; echo child-status=$?",
    ];
    let r = approve_and_run(&e, &["--memory", "512MiB"], &probe);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    assert!(
        r.stdout_text().contains("child-status=137"),
        "{}",
        r.stdout_text()
    );
    assert_eq!(resources(&r)["oom_kills"], 1, "{}", resources(&r));
}

#[test]
fn cpu_time_of_two_children_burning_half_a_second_each_is_at_least_one_second() {
    require_tool!(
        "cpu_time_of_two_children_burning_half_a_second_each_is_at_least_one_second",
        "python3"
    );
    let e = Env::new();
    let burn = "import time\nwhile time.process_time() < 0.5: pass";
    let script = format!(
        "import subprocess, sys; ps = [subprocess.Popen([sys.executable, '-c', {burn:?}]) for _ in range(2)]; [p.wait() for p in ps]"
    );
    let probe = ["python3", "-c", script.as_str()];
    let r = approve_and_run(&e, &[], &probe);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    let res = resources(&r);
    let cpu = res["cpu_user_ms"].as_u64().unwrap() + res["cpu_system_ms"].as_u64().unwrap();
    assert!(cpu >= 1000, "{res}");
    assert_eq!(res["fit"]["cpu_time_ms"]["used"], cpu);
}

#[test]
fn peak_memory_of_three_processes_holding_100_mib_each_is_at_least_300_mib() {
    require_tool!(
        "peak_memory_of_three_processes_holding_100_mib_each_is_at_least_300_mib",
        "python3"
    );
    let e = Env::new();
    // Each holds its 100 MiB until all three hold theirs (files as the
    // barrier), so the three peaks overlap whatever the scheduling.
    let hold = "import os, sys, time\nb = b'x' * (100 << 20)\nopen('ready-' + sys.argv[1], 'w').close()\nwhile sum(os.path.exists('ready-%d' % i) for i in range(3)) < 3: time.sleep(0.01)\nprint(len(b))";
    let script = format!(
        "import subprocess, sys; ps = [subprocess.Popen([sys.executable, '-c', {hold:?}, str(i)]) for i in range(3)]; sys.exit(sum(p.wait() for p in ps))"
    );
    let probe = ["python3", "-c", script.as_str()];
    let r = approve_and_run(&e, &["--memory", "2GiB"], &probe);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    let res = resources(&r);
    match res["peak_memory_bytes"].as_u64() {
        Some(peak) => assert!(peak >= 300 * MIB, "{res}"),
        None => {
            assert!(res["peak_memory_bytes_why"].is_string(), "{res}");
            skip!(
                "peak_memory_of_three_processes…: no memory cgroup here: {}",
                res["peak_memory_bytes_why"]
            );
        }
    }
}

#[test]
fn io_written_by_a_child_writing_64_mib_with_fsync_is_at_least_64_mib() {
    require_tool!(
        "io_written_by_a_child_writing_64_mib_with_fsync_is_at_least_64_mib",
        "python3"
    );
    let e = Env::new();
    let probe = [
        "python3",
        "-c",
        "import os\nwith open('big.bin', 'wb') as f:\n    for _ in range(64): f.write(b'x' * (1 << 20))\n    f.flush(); os.fsync(f.fileno())",
    ];
    let r = approve_and_run(&e, &[], &probe);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    let res = resources(&r);
    match res["io_write_bytes"].as_u64() {
        Some(w) => assert!(w >= 64 * MIB, "{res}"),
        None => {
            assert!(res["io_write_bytes_why"].is_string(), "{res}");
            skip!(
                "io_written_by_a_child…: the kernel cannot account IO here: {}",
                res["io_write_bytes_why"]
            );
        }
    }
}

#[test]
fn peak_processes_of_a_20_process_fork_is_at_least_20() {
    let e = Env::new();
    // All twenty are alive together: they sleep until the shell kills them.
    let probe = [
        "sh",
        "-c",
        "i=0; pids=; while [ $i -lt 20 ]; do sleep 1000 & pids=\"$pids $!\"; i=$((i+1)); done; kill $pids; wait; echo done",
    ];
    let r = approve_and_run(&e, &[], &probe);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    let res = resources(&r);
    match res["peak_processes"].as_u64() {
        Some(n) => {
            assert!(n >= 20, "{res}");
            assert_eq!(res["fit"]["processes"]["used"], n);
        }
        None => {
            assert!(res["peak_processes_why"].is_string(), "{res}");
            skip!(
                "peak_processes_of_a_20_process_fork…: no pids.peak here: {}",
                res["peak_processes_why"]
            );
        }
    }
}

/// Whether this (root) process holds CAP_SYS_RESOURCE, which the child
/// inherits when no isolation option drops it.
fn has_cap_sys_resource() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|m| m & (1 << 24) != 0)
}

/// `inner` as root in a private mount namespace where every cgroup mount
/// is read-only (Docker's default): no per-run group can be made.
fn in_readonly_cgroupfs(inner: &Command) -> Command {
    let script = "for m in $(awk '$9 ~ /^cgroup/ {print $5}' /proc/self/mountinfo); do mount -o remount,bind,ro \"$m\" || exit 91; done; exec \"$@\"";
    let mut c = Command::new("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c", script, "sh"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .stdin(std::process::Stdio::null());
    c
}

#[test]
fn a_readonly_cgroupfs_falls_back_to_rlimit_as_and_rusage_and_doctor_agrees() {
    if !is_root() {
        skip!("a_readonly_cgroupfs_falls_back…: needs root (mount namespace)");
        return;
    }
    let e = Env::new();
    // 1 GiB of address space: fine under a 512 MiB memory cgroup (never
    // touched), refused by RLIMIT_AS — the fallback is really in force.
    let probe = [
        "python3",
        "-c",
        "import mmap\ntry:\n    mmap.mmap(-1, 1 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=0); print('mapped')\nexcept OSError as err: print('refused', err.errno)",
    ];
    e.approve(
        &["--memory", "512MiB", "--max-processes", "unlimited"],
        &probe,
    );
    let r = finish_run(output(in_readonly_cgroupfs(&e.run_cmd(&[], &probe))));
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    let p = r.predicate();
    assert_eq!(
        p["isolation"]["memory_limit"], "rlimit_as",
        "{}",
        p["isolation"]
    );
    // Root with CAP_SYS_RESOURCE could raise its hard RLIMIT_AS (this
    // machine's root may lack it: then it could not).
    assert_eq!(
        p["isolation"]["memory_limit_evadable"],
        has_cap_sys_resource(),
        "{}",
        p["isolation"]
    );
    assert!(
        r.stdout_text().contains("refused 12"),
        "RLIMIT_AS did not refuse 1 GiB: {}",
        r.stdout_text()
    );
    let res = resources(&r);
    assert_eq!(res["mechanism"], "rusage", "{res}");
    for k in ["peak_memory_bytes", "peak_processes", "oom_kills"] {
        assert!(res[k].is_null(), "{k}: {res}");
        assert!(res[format!("{k}_why")].is_string(), "{k}_why: {res}");
    }

    let wrap = |c: &Command| in_readonly_cgroupfs(c);
    let mem = doctor_check_of(Some(&wrap), "memory");
    assert_eq!(mem["mechanism"], "rlimit_as", "{mem}");
    assert!(
        mem["detail"].as_str().unwrap_or("").contains("RLIMIT_AS"),
        "{mem}"
    );
    let acc = doctor_check_of(Some(&wrap), "resource_accounting");
    assert_eq!(acc["mechanism"], "rusage", "{acc}");
}

#[test]
fn doctor_names_the_memory_mechanism_run_uses() {
    let e = Env::new();
    let probe = ["true"];
    let r = approve_and_run(&e, &["--memory", "256MiB"], &probe);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mem = doctor_check_of(None, "memory");
    assert_eq!(
        mem["mechanism"],
        r.predicate()["isolation"]["memory_limit"],
        "{mem}"
    );
    let acc = doctor_check_of(None, "resource_accounting");
    assert_eq!(acc["mechanism"], resources(&r)["mechanism"], "{acc}");
}

fn goal_with(criterion: &str) -> String {
    format!(
        r#"{{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
  "criteria": [ {{ "kind": "exit_code", "equals": 0 }}, {criterion} ] }}"#
    )
}

fn verify_against(e: &Env, goal: &str, receipt: &Path) -> (i32, String) {
    let g = e.path("verify-goal.json");
    std::fs::write(&g, goal).unwrap();
    let o = output(
        cmd()
            .arg("verify")
            .arg("--goal")
            .arg(&g)
            .arg("--receipt")
            .arg(receipt)
            .arg("--trust")
            .arg(e.runner_pub())
            .arg("--allow-key-in-reach"),
    );
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).to_string(),
    )
}

#[test]
fn a_resources_criterion_fails_verify_with_a_line_naming_the_limit_and_the_figure() {
    require_tool!(
        "a_resources_criterion_fails_verify_with_a_line_naming_the_limit_and_the_figure",
        "python3"
    );
    let e = Env::new();
    let wide = goal_with(
        r#"{ "kind": "resources", "peak_memory_at_most": "2GiB", "cpu_time_at_most": "10m", "wall_time_at_most": "15m" }"#,
    );
    e.set_goal(&wide);
    let probe = [
        "python3",
        "-c",
        "import time; b = b'x' * (20 << 20); t = time.time()\nwhile time.time() - t < 0.05: pass",
    ];
    // A child of another uid cannot leave the run's cgroups, so their
    // figures count (a uid-0 child's do not: below).
    let as_user: &[&str] = if is_root() {
        &["--as-user", "65534"]
    } else {
        &[]
    };
    e.approve(as_user, &probe);
    let r = e.run(&[], &probe);
    let receipt = e.path("r.json");
    std::fs::write(&receipt, &r.stdout).unwrap();
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    let has_peak = resources(&r)["peak_memory_bytes"].is_u64();
    let (code, text) = verify_against(&e, &wide, &receipt);
    if has_peak {
        assert_eq!(
            (code, text.lines().next()),
            (0, Some("VERIFIED_DONE")),
            "{text}"
        );
    } else {
        // Without a memory cgroup the receipt cannot prove a memory bound.
        assert!(text.contains("peak_memory_at_most 2GiB"), "{text}");
    }
    if is_root() && has_peak {
        // The same run by a uid-0 child with every capability: the figures
        // are under the bounds, yet they prove nothing.
        e.approve(&[], &probe);
        let (root_run, root_receipt) = e.run_to_file("root.json", &probe);
        assert_eq!(root_run.predicate()["cleanup"]["evadable"], true);
        let (code, text) = verify_against(&e, &wide, &root_receipt);
        assert_eq!(code, 1, "{text}");
        for bound in ["peak_memory_at_most 2GiB", "cpu_time_at_most 10m"] {
            assert!(
                text.lines()
                    .any(|l| l.contains(bound) && l.contains("is not proof")),
                "{bound}: {text}"
            );
        }
    }

    let tight = goal_with(
        r#"{ "kind": "resources", "peak_memory_at_most": "1MiB", "cpu_time_at_most": "1ms", "wall_time_at_most": "1ms" }"#,
    );
    let (code, text) = verify_against(&e, &tight, &receipt);
    assert_eq!(
        (code, text.lines().next()),
        (1, Some("NOT_VERIFIED")),
        "{text}"
    );
    let wall = text
        .lines()
        .find(|l| l.contains("wall_time_at_most 1ms"))
        .unwrap_or_else(|| panic!("no wall time line: {text}"));
    let took = r.predicate()["duration_ms"].as_u64().unwrap();
    assert!(wall.contains(&format!("({took} ms)")), "{wall}");
    let res = resources(&r);
    let cpu = res["cpu_user_ms"].as_u64().unwrap() + res["cpu_system_ms"].as_u64().unwrap();
    let cpu_line = text
        .lines()
        .find(|l| l.contains("cpu_time_at_most 1ms"))
        .unwrap_or_else(|| panic!("no cpu time line: {text}"));
    assert!(
        cpu_line.contains(&format!(
            "{} ms user + {} ms system",
            res["cpu_user_ms"], res["cpu_system_ms"]
        )) && cpu > 1,
        "{cpu_line}"
    );
    let mem = text
        .lines()
        .find(|l| l.contains("peak_memory_at_most 1MiB"))
        .unwrap_or_else(|| panic!("no memory line: {text}"));
    if let Some(peak) = resources(&r)["peak_memory_bytes"].as_u64() {
        assert!(mem.contains(&format!("{peak} bytes")), "{mem}");
    } else {
        assert!(mem.contains("no peak memory"), "{mem}");
    }
}

#[test]
fn a_resources_criterion_is_a_closed_shape_with_at_least_one_bound() {
    let e = Env::new();
    for (criterion, needle) in [
        (
            r#"{ "kind": "resources", "peak_memory": "1GiB" }"#,
            "peak_memory",
        ),
        (r#"{ "kind": "resources" }"#, "at least one"),
        (
            r#"{ "kind": "resources", "cpu_time_at_most": "soon" }"#,
            "cpu_time_at_most",
        ),
        (
            r#"{ "kind": "resources", "peak_memory_at_most": "2GB" }"#,
            "peak_memory_at_most",
        ),
    ] {
        e.set_goal(&goal_with(criterion));
        let o = output(e.approve_cmd(&[], &["true"]));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{criterion}: {err}");
        assert!(err.contains(needle), "{criterion}: {err}");
    }
}

#[test]
fn a_non_root_runner_without_a_delegated_cgroup_falls_back_and_doctor_agrees() {
    if !is_root() {
        skip!("a_non_root_runner…: needs root to drop to uid 65534 with setpriv");
        return;
    }
    let (e, bin) = unprivileged_env();
    let probe = [
        "sh",
        "-c",
        "ulimit -v; python3 -c 'import time\nwhile time.process_time() < 0.2: pass'",
    ];
    let o = output_settled(as_nobody(
        &bin,
        &e.approve_cmd(&["--memory", "512MiB"], &probe),
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = run_as_nobody(&bin, &e.run_cmd(&[], &probe));
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    let p = r.predicate();
    assert_eq!(
        p["isolation"]["memory_limit"], "rlimit_as",
        "{}",
        p["isolation"]
    );
    assert_eq!(p["isolation"]["memory_limit_evadable"], false);
    // RLIMIT_AS in KiB, read back by the child itself.
    assert!(
        r.stdout_text().starts_with("524288\n"),
        "{}",
        r.stdout_text()
    );
    let res = resources(&r);
    assert_eq!(res["mechanism"], "rusage", "{res}");
    let cpu = res["cpu_user_ms"].as_u64().unwrap() + res["cpu_system_ms"].as_u64().unwrap();
    assert!(cpu >= 200, "{res}");
    assert!(res["peak_processes"].is_null() && res["peak_processes_why"].is_string());

    let mut dc = cmd();
    dc.args(["doctor", "--json"]);
    let o = output_settled(as_nobody(&bin, &dc));
    let d: Value = serde_json::from_slice(&o.stdout).expect("doctor --json");
    let check = |name: &str| {
        d["checks"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["name"] == name))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(check("memory")["mechanism"], "rlimit_as", "{d}");
    assert_eq!(check("resource_accounting")["mechanism"], "rusage", "{d}");
}

#[test]
fn a_child_of_another_uid_is_held_by_the_memory_cgroup_and_cannot_leave_it() {
    if memory_cgroup("a_child_of_another_uid_is_held_by_the_memory_cgroup_and_cannot_leave_it")
        .is_none()
    {
        return;
    }
    let e = Env::new();
    // uid 65534 tries to leave: it writes itself into the top `tasks` and
    // `cgroup.procs` of every hierarchy; each write must fail, and the
    // limit then still holds for its child.
    let probe = [
        "sh",
        "-c",
        "for m in /sys/fs/cgroup/*; do for f in \"$m/cgroup.procs\" \"$m/tasks\"; do [ -e \"$f\" ] && (echo $$ > \"$f\") 2>/dev/null && echo LEFT $f; done; done; \
         python3 -c \"b = b'x' * (600 << 20)\"; echo child=$?",
    ];
    let r = approve_and_run(&e, &["--as-user", "65534", "--memory", "512MiB"], &probe);
    assert_eq!((r.code, r.class()), (0, "exited"), "{}", r.stderr);
    let t = r.stdout_text();
    assert!(!t.contains("LEFT"), "{t}");
    assert!(t.contains("child=137"), "the limit did not hold: {t}");
    let iso = &r.predicate()["isolation"];
    assert_eq!(iso["memory_limit_evadable"], false, "{iso}");
    assert_eq!(resources(&r)["oom_kills"], 1);
}
