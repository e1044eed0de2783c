//! Against a real Docker engine (CONTRACT §7, §6.8): Docker's
//! default seccomp profile (clone3 → ENOSYS), capabilities (no
//! CAP_SYS_ADMIN) and cgroup mounts (read-only), `--pids-limit`, `docker
//! stop`, governed-exec as PID 1, `--user 1000`.
//!
//! The image is built once per test binary run, `FROM scratch` with the
//! static binary (built by scripts/check-dockerfile.sh from exactly the
//! files the shipped Dockerfile copies) and Debian's `busybox-static`;
//! nothing is pulled. Each test runs one container whose shell approves
//! (identities are per container: the image's files get a new device in
//! every container) and then `exec`s governed-exec, which becomes PID 1.
//! Without a daemon every test says SKIP loudly; tests/it/process/containers.rs
//! covers the same logic by simulation.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

static IMAGE: OnceLock<Result<String, String>> = OnceLock::new();

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run docker")
}

fn busybox() -> Option<PathBuf> {
    ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| {
            // Only the static build runs in a FROM-scratch image.
            Command::new("file")
                .arg(p)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("statically linked"))
                .unwrap_or(p.exists())
        })
}

fn build_image() -> Result<String, String> {
    let v = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .map_err(|e| format!("no docker client: {e}"))?;
    if !v.status.success() {
        return Err(format!(
            "no Docker daemon reachable: {}",
            String::from_utf8_lossy(&v.stderr).trim()
        ));
    }
    let bb = busybox().ok_or("busybox-static is not installed (apt-get install busybox-static)")?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The static binary the shipped Dockerfile's build stage makes, built
    // from exactly the files it copies (a no-op when CI's check just did).
    let built = Command::new("bash")
        .arg(root.join("scripts/check-dockerfile.sh"))
        .arg("binary")
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("scripts/check-dockerfile.sh: {e}"))?;
    if !built.status.success() {
        return Err("scripts/check-dockerfile.sh binary failed".into());
    }
    // Images of earlier runs (an hour old, no container using them).
    let _ = docker(&[
        "image",
        "prune",
        "-a",
        "-f",
        "--filter",
        "label=governed-exec-test=1",
        "--filter",
        "until=1h",
    ]);
    let bin = String::from_utf8_lossy(&built.stdout).trim().to_string();
    let ctx = tempfile::tempdir().map_err(|e| e.to_string())?;
    std::fs::copy(&bin, ctx.path().join("governed-exec")).map_err(|e| format!("{bin}: {e}"))?;
    std::fs::copy(&bb, ctx.path().join("busybox")).map_err(|e| e.to_string())?;
    std::fs::write(
        ctx.path().join("Dockerfile"),
        "FROM scratch\n\
         COPY busybox /bin/busybox\n\
         RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n\
         RUN [\"/bin/busybox\", \"sh\", \"-c\", \"mkdir -p /tmp /work /var/lib/governed-exec /usr/local/bin && chmod 1777 /tmp\"]\n\
         COPY governed-exec /usr/local/bin/governed-exec\n\
         ENV PATH=/usr/local/bin:/bin GOVERNED_EXEC_STATE_DIR=/var/lib/governed-exec\n\
         VOLUME [\"/var/lib/governed-exec\"]\n\
         ENTRYPOINT [\"/usr/local/bin/governed-exec\"]\n",
    )
    .map_err(|e| e.to_string())?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let tag = format!("governed-exec-test:{}-{nanos}", std::process::id());
    // scripts/test.sh names its run, and removes this run's images (and
    // only those: other suites may be running beside it) when it ends.
    let run_label = format!(
        "governed-exec-test-run={}",
        std::env::var("GOVERNED_EXEC_TEST_RUN").unwrap_or_else(|_| std::process::id().to_string())
    );
    let o = docker(&[
        "build",
        "-q",
        "--label",
        "governed-exec-test=1",
        "--label",
        &run_label,
        "-t",
        &tag,
        ctx.path().to_str().unwrap(),
    ]);
    if !o.status.success() {
        return Err(format!(
            "docker build: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(tag)
}

/// The test image's tag, or SKIP with the reason.
macro_rules! require_docker {
    ($name:expr) => {
        match IMAGE.get_or_init(build_image) {
            Ok(tag) => tag.clone(),
            Err(why) => {
                skip!("{}: {why}", $name);
                return;
            }
        }
    };
}

/// A test [`Env`] (goal, approver key, workspace, state) mounted at /work:
/// its layout is the one APPROVE and RUN name below.
struct Volume {
    env: Env,
    image: String,
}

const GOAL: &str = r#"{ "schema": "governed-exec/goal/v1", "id": "docker", "revision": 1,
  "criteria": [ { "kind": "exit_code", "equals": 0 }, { "kind": "no_leftover_processes" } ] }"#;

impl Volume {
    fn new(image: &str) -> Volume {
        use std::os::unix::fs::PermissionsExt;
        let env = Env::new();
        env.set_goal(GOAL);
        std::fs::create_dir(&env.state).expect("state");
        // `--user 1000` must be able to write the workspace and state, and
        // read the approver key.
        for (p, mode) in [
            (env.dir.path(), 0o777),
            (&env.ws, 0o777),
            (&env.state, 0o777),
            (&env.key, 0o644),
        ] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
        Volume {
            env,
            image: image.to_string(),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.env.path(rel)
    }

    /// `docker run` flags + a shell script ending in `exec governed-exec …`.
    fn args(&self, flags: &[&str], script: &str) -> Vec<String> {
        let mut a: Vec<String> = ["run", "--rm", "-v"].map(String::from).to_vec();
        a.push(format!("{}:/work", self.env.dir.path().display()));
        a.extend(flags.iter().map(|s| s.to_string()));
        a.extend(["--entrypoint", "/bin/sh", &self.image, "-c", script].map(String::from));
        a
    }

    fn run(&self, flags: &[&str], script: &str) -> Output {
        let a = self.args(flags, script);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        docker(&refs)
    }

    fn receipt(&self, name: &str) -> Value {
        let bytes = std::fs::read(self.path(name))
            .unwrap_or_else(|e| panic!("receipt {name} on the volume: {e}"));
        decode_envelope(&bytes)
    }

    /// `verify` inside a container, against the receipt on the volume.
    fn verify(&self, receipt: &str) -> (i32, String) {
        let o = self.run(
            &[],
            &format!("exec governed-exec verify --goal /work/goal.json --receipt /work/{receipt} --trust /work/state/runner.pub --state-dir /work/state"),
        );
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).to_string(),
        )
    }
}

const APPROVE: &str = "governed-exec approve --goal /work/goal.json --workspace /work/ws --manifest /work/manifest.json --key /work/approver.key";
const RUN: &str = "governed-exec run --goal /work/goal.json --manifest /work/manifest.json --trust /work/approver.pub --state-dir /work/state";

/// The script most tests run in the container: approve `sh -c CHILD` with
/// `flags`, then `exec` the run of it (governed-exec is PID 1) with its
/// receipt at /work/RECEIPT.
fn approve_then_run(flags: &[&str], child: &str, receipt: &str) -> String {
    let flags = flags.join(" ");
    format!(
        "{APPROVE} {flags} -- sh -c '{child}' 2>/dev/null && exec {RUN} --receipt /work/{receipt} -- sh -c '{child}'"
    )
}

fn text(o: &Output) -> String {
    format!(
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn default_docker_run_runs_an_approved_command_and_the_receipt_verifies() {
    let image =
        require_docker!("default_docker_run_runs_an_approved_command_and_the_receipt_verifies");
    let b = Volume::new(&image);
    // A default lease (max_processes 1024) for a root child: under Docker's
    // defaults no mechanism can bound it, so it is refused with the way out.
    // The lease a container needs (--as-user: RLIMIT_NPROC binds the child,
    // and the root-owned key is out of its reach) runs as PID 1 and verifies.
    let work = "echo pid=$$ ppid=$PPID uid=$(id -u); echo hello from docker > out.txt; cat out.txt";
    let script = format!(
        "{APPROVE} -- sh -c 'echo refused' 2>/dev/null && \
         {RUN} --receipt /work/refused.json -- sh -c 'echo refused'; echo refused_exit=$? > /work/refused.code; \
         {APPROVE} --as-user 1000 -- sh -c '{work}' 2>/dev/null && \
         exec {RUN} --receipt /work/receipt.json -- sh -c '{work}'"
    );
    let o = b.run(&[], &script);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let refused = std::fs::read_to_string(b.path("refused.code")).unwrap();
    assert_eq!(refused.trim(), "refused_exit=125");
    let r = b.receipt("refused.json");
    assert_eq!(r["predicate"]["outcome"]["reason"], "isolation_unavailable");
    let msg = r["predicate"]["outcome"]["message"].as_str().unwrap_or("");
    assert!(
        msg.contains("--pids-limit") && msg.contains("unlimited"),
        "{msg}"
    );
    let journal: String = std::fs::read_dir(b.path("state/journal"))
        .unwrap()
        .flatten()
        .map(|f| std::fs::read_to_string(f.path()).unwrap_or_default())
        .collect();
    assert_eq!(
        journal.matches("\"kind\":\"executing\"").count(),
        1,
        "the refusal spent a use: {journal}"
    );

    let s = b.receipt("receipt.json");
    let p = &s["predicate"];
    assert_eq!(p["outcome"]["class"], "exited", "{p}");
    // Docker's default seccomp profile answers clone3 with ENOSYS.
    assert_eq!(p["spawn_path"], "clone_pidfd");
    assert_eq!(p["process_limit"]["mechanism"], "rlimit_nproc");
    assert_eq!(p["isolation"]["process_limit"], "rlimit_nproc");
    assert_eq!(
        p["signing"]["key_out_of_child_reach"], true,
        "{}",
        p["signing"]
    );
    assert_eq!(p["cleanup"]["state"], "gone");
    let out = p["streams"]["stdout"]["text"].as_str().unwrap_or("");
    assert!(
        out.contains("hello from docker") && out.contains("uid=1000"),
        "{out}"
    );
    // The child's parent is governed-exec, PID 1 of the container.
    assert!(out.contains("ppid=1 "), "{out}");
    let (code, verdict) = b.verify("receipt.json");
    assert_eq!(
        (code, verdict.lines().next()),
        (0, Some("VERIFIED_DONE")),
        "{verdict}"
    );
}

#[test]
fn pids_limit_is_the_named_mechanism_and_bounds_a_fork_storm() {
    let image = require_docker!("pids_limit_is_the_named_mechanism_and_bounds_a_fork_storm");
    let b = Volume::new(&image);
    // Sleeps long enough that they pile up however slowly a loaded machine
    // forks (with `sleep 3` they could end before the 64th fork under load).
    let storm = "i=0; while [ $i -lt 150 ]; do sleep 30 & i=$((i+1)); done; wait; echo storm-over";
    let script = approve_then_run(&[], storm, "receipt.json");
    let o = b.run(&["--pids-limit", "64"], &script);
    let p = b.receipt("receipt.json")["predicate"].clone();
    assert_eq!(p["process_limit"]["mechanism"], "enclosing_pids_max", "{p}");
    assert_eq!(p["process_limit"]["enforced_limit"], 64);
    // The storm hit the limit: a fork was refused (busybox sh gives up with
    // exit 2), the run ended by itself, and the sleeps it left were killed.
    let err = p["streams"]["stderr"]["text"].as_str().unwrap_or("");
    assert!(
        err.contains("can't fork"),
        "no fork was refused: {err}\nreceipt: {p}\ndocker run: {}",
        text(&o)
    );
    assert_eq!(p["outcome"]["class"], "exited");
    assert_eq!(
        o.status.code(),
        p["outcome"]["exit_code"].as_i64().map(|c| c as i32),
        "{}",
        text(&o)
    );
    assert_eq!(p["cleanup"]["state"], "gone");
    let killed = p["cleanup"]["leftover_processes_killed"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        (1..64).contains(&killed),
        "{killed} leftovers with pids.max 64"
    );
}

#[test]
fn docker_stop_cancels_a_child_ignoring_sigterm_with_exit_143() {
    let image = require_docker!("docker_stop_cancels_a_child_ignoring_sigterm_with_exit_143");
    let b = Volume::new(&image);
    let child = "trap \"\" TERM; (sh -c \"trap \\\"\\\" TERM; while :; do sleep 1; done\" &); echo up > /work/started; while :; do sleep 1; done";
    let script = approve_then_run(&["--max-processes", "unlimited"], child, "receipt.json");
    let name = format!(
        "ge-stop-{}-{}",
        std::process::id(),
        b.env
            .dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace('.', "")
    );
    let mut a = b.args(&["-d", "--name", &name], &script);
    a.retain(|x| x != "--rm");
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = docker(&refs);
    assert!(o.status.success(), "{}", text(&o));
    let started = Instant::now();
    while !b.path("started").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the child never started: {}",
            text(&docker(&["logs", &name]))
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let t0 = Instant::now();
    let stop = docker(&["stop", "-t", "10", &name]);
    let took = t0.elapsed();
    let code = docker(&["inspect", "--format", "{{.State.ExitCode}}", &name]);
    let logs = docker(&["logs", &name]);
    let _ = docker(&["rm", "-f", &name]);
    assert!(stop.status.success(), "{}", text(&stop));
    assert_eq!(
        String::from_utf8_lossy(&code.stdout).trim(),
        "143",
        "{}",
        text(&logs)
    );
    eprintln!("docker stop took {took:?} (cancel grace 2s)");
    assert!(took < Duration::from_secs(8), "docker stop took {took:?}");
    let p = b.receipt("receipt.json")["predicate"].clone();
    assert_eq!(p["outcome"]["class"], "cancelled_reaped", "{p}");
    assert_eq!(p["outcome"]["signal"], 15);
    assert_eq!(p["cleanup"]["state"], "gone");
    // The result record is in the journal on the volume.
    let journal: String = std::fs::read_dir(b.path("state/journal"))
        .unwrap()
        .flatten()
        .map(|f| std::fs::read_to_string(f.path()).unwrap_or_default())
        .collect();
    assert!(journal.contains("\"kind\":\"result\""), "{journal}");
    assert!(journal.contains("cancelled_reaped"));
}

#[test]
fn orphans_are_reaped_while_governed_exec_is_pid_1() {
    let image = require_docker!("orphans_are_reaped_while_governed_exec_is_pid_1");
    let b = Volume::new(&image);
    // Orphans that exit during the run: governed-exec (PID 1 and subreaper)
    // must reap them at once, not leave zombies until the end.
    let child = "for i in 1 2 3 4 5; do (sleep 0.1 &); done; sleep 1; echo zombies=$(cat /proc/[0-9]*/stat | awk \"\\$3 == \\\"Z\\\"\" | wc -l)";
    let script = approve_then_run(&["--max-processes", "unlimited"], child, "receipt.json");
    let o = b.run(&[], &script);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let p = b.receipt("receipt.json")["predicate"].clone();
    let out = p["streams"]["stdout"]["text"].as_str().unwrap_or("");
    assert!(out.contains("zombies=0"), "{out}");
    assert_eq!(p["cleanup"]["state"], "gone");
}

#[test]
fn user_1000_doctor_says_what_run_does() {
    let image = require_docker!("user_1000_doctor_says_what_run_does");
    let b = Volume::new(&image);
    let net = "nc 127.0.0.1 9 </dev/null 2>&1; echo nc_exit=$?";
    let pidns = "echo pid=$$";
    let script = format!(
        "governed-exec doctor --json > /work/doctor.json && governed-exec doctor > /work/doctor.txt && \
         {APPROVE} --no-network -- sh -c '{net}' 2>/dev/null && \
         {RUN} --receipt /work/net.json -- sh -c '{net}'; \
         {APPROVE} --pid-namespace -- sh -c '{pidns}' 2>/dev/null && \
         {RUN} --receipt /work/pidns.json -- sh -c '{pidns}'; \
         {APPROVE} -- true 2>/dev/null && exec {RUN} --receipt /work/plain.json -- true"
    );
    let o = b.run(&["--user", "1000:1000"], &script);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doctor: Value =
        serde_json::from_slice(&std::fs::read(b.path("doctor.json")).unwrap()).unwrap();
    let check = |name: &str| -> Value {
        doctor["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("doctor has no {name}: {doctor}"))
    };
    assert_eq!(doctor["euid"], 1000);
    let net_r = b.receipt("net.json")["predicate"].clone();
    let pid_r = b.receipt("pidns.json")["predicate"].clone();
    let plain = b.receipt("plain.json")["predicate"].clone();

    // spawn: doctor's answer is the receipt's spawn path.
    assert_eq!(check("spawn")["mechanism"], plain["spawn_path"]);
    assert_eq!(plain["spawn_path"], "clone_pidfd");
    // --no-network: Docker's profile forbids namespaces to uid 1000, so the
    // seccomp filter is the mechanism, in doctor and in the receipt.
    let no_net = check("no_network");
    assert_eq!(
        no_net["mechanism"], net_r["isolation"]["network_mechanism"],
        "{net_r}"
    );
    assert_eq!(
        net_r["isolation"]["network_mechanism"],
        "seccomp_socket_families"
    );
    assert_eq!(net_r["outcome"]["class"], "exited");
    let out = net_r["streams"]["stdout"]["text"].as_str().unwrap_or("");
    assert!(out.contains("Address family not supported"), "{out}");
    // --pid-namespace: doctor says no, run refuses it with zero spawn.
    let pid_check = check("pid_namespace");
    assert_eq!(pid_check["available"], false, "{pid_check}");
    assert_eq!(
        pid_r["outcome"]["reason"], "isolation_unavailable",
        "{pid_r}"
    );
    // The process limit: RLIMIT_NPROC for a non-root child, both say so.
    let std_limit = doctor["process_limit_by_profile"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["profile"] == "standard")
        .cloned()
        .unwrap();
    assert_eq!(std_limit["mechanism"], plain["process_limit"]["mechanism"]);
    assert_eq!(plain["process_limit"]["mechanism"], "rlimit_nproc");
    assert_eq!(plain["outcome"]["class"], "exited");
    let journal: String = std::fs::read_dir(b.path("state/journal"))
        .unwrap()
        .flatten()
        .map(|f| std::fs::read_to_string(f.path()).unwrap_or_default())
        .collect();
    // Two runs spent a use; the refused one did not.
    assert_eq!(
        journal.matches("\"kind\":\"executing\"").count(),
        2,
        "{journal}"
    );
}

#[test]
fn under_docker_defaults_memory_falls_back_to_rlimit_as_and_rusage_and_doctor_agrees() {
    let image = require_docker!(
        "under_docker_defaults_memory_falls_back_to_rlimit_as_and_rusage_and_doctor_agrees"
    );
    let b = Volume::new(&image);
    // `ulimit -v` prints RLIMIT_AS in KiB: the fallback is really in force.
    let work = "ulimit -v";
    let script = format!(
        "governed-exec doctor --json > /work/doctor.json && \
         {APPROVE} --as-user 1000 --memory 512MiB -- sh -c '{work}' 2>/dev/null && \
         exec {RUN} --receipt /work/mem.json -- sh -c '{work}'"
    );
    let o = b.run(&[], &script);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doctor: Value =
        serde_json::from_slice(&std::fs::read(b.path("doctor.json")).unwrap()).unwrap();
    let check = |name: &str| -> Value {
        doctor["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("doctor has no {name}: {doctor}"))
    };
    let p = b.receipt("mem.json")["predicate"].clone();
    assert_eq!(p["outcome"]["class"], "exited", "{p}");
    assert_eq!(p["isolation"]["memory_limit"], "rlimit_as", "{p}");
    assert_eq!(check("memory")["mechanism"], "rlimit_as");
    let out = p["streams"]["stdout"]["text"].as_str().unwrap_or("");
    assert_eq!(out.trim(), "524288", "{out}");
    let res = &p["resources"];
    assert_eq!(res["mechanism"], "rusage", "{res}");
    assert_eq!(check("resource_accounting")["mechanism"], "rusage");
    assert!(res["peak_memory_bytes"].is_null() && res["peak_memory_bytes_why"].is_string());
    assert!(res["oom_kills"].is_null() && res["oom_kills_why"].is_string());
}

#[test]
fn allow_net_under_docker_defaults_is_refused_with_zero_spawn_and_doctor_agrees() {
    let image = require_docker!(
        "allow_net_under_docker_defaults_is_refused_with_zero_spawn_and_doctor_agrees"
    );
    let b = Volume::new(&image);
    // Root without CAP_SYS_ADMIN (Docker's defaults): the proxy's network
    // namespace cannot be made, so --allow-net is isolation_unavailable
    // before the use is spent, and doctor says why.
    let touch = "echo ran > /work/ws/ran";
    let script = format!(
        "governed-exec doctor --json > /work/doctor.json && \
         {APPROVE} --as-user 1000 --allow-net pypi.org -- sh -c '{touch}' 2>/dev/null && \
         {RUN} --receipt /work/net.json -- sh -c '{touch}'; echo exit=$? > /work/net.code"
    );
    let o = b.run(&[], &script);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(b.path("net.code")).unwrap().trim(),
        "exit=125"
    );
    let p = b.receipt("net.json")["predicate"].clone();
    assert_eq!(p["outcome"]["reason"], "isolation_unavailable", "{p}");
    let msg = p["outcome"]["message"].as_str().unwrap_or("");
    assert!(
        msg.contains("--allow-net") && msg.contains("CAP_SYS_ADMIN"),
        "{msg}"
    );
    assert!(!b.path("ws/ran").exists(), "the command ran");
    let journal: String = std::fs::read_dir(b.path("state/journal"))
        .map(|rd| {
            rd.flatten()
                .map(|f| std::fs::read_to_string(f.path()).unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        journal.matches("\"kind\":\"executing\"").count(),
        0,
        "{journal}"
    );
    let doctor: Value =
        serde_json::from_slice(&std::fs::read(b.path("doctor.json")).unwrap()).unwrap();
    let check = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "allow_net")
        .cloned()
        .unwrap_or_else(|| panic!("doctor has no allow_net: {doctor}"));
    assert_eq!(check["available"], false, "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap_or("")
            .contains("CAP_SYS_ADMIN"),
        "{check}"
    );
}

/// `docker run --user 1000` with the image's own state volume: a new
/// anonymous volume takes the owner of the image's root-owned directory, so
/// the first run cannot make its runner key there, and the refusal says
/// which directory, its owner and mode, and the uid that tried (not a
/// missing mount). A state volume owned by that uid (what
/// examples/container/Dockerfile's RUNNER_UID arranges) runs.
#[test]
fn user_1000_with_a_root_owned_state_volume_is_told_whose_it_is() {
    let image = require_docker!("user_1000_with_a_root_owned_state_volume_is_told_whose_it_is");
    let v = Volume::new(&image);
    let o = v.run(
        &["--user", "1000:1000"],
        &format!("{APPROVE} -- true >/dev/null 2>&1 && exec governed-exec run --goal /work/goal.json --manifest /work/manifest.json --trust /work/approver.pub -- true"),
    );
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("/var/lib/governed-exec is owned by uid 0 gid 0 with mode 0755, and uid 1000 (gid 1000) cannot write in it"),
        "{}",
        text(&o)
    );
    // The volume given to uid 1000: the same run goes through.
    let o = v.run(
        &[
            "--user",
            "1000:1000",
            "--tmpfs",
            "/var/lib/governed-exec:uid=1000,gid=1000,mode=0700",
        ],
        // Approved again in this container: a machine-bound lease pins
        // /bin/busybox's device, which differs between containers.
        &format!("{APPROVE} -- true >/dev/null 2>&1 && exec governed-exec run --goal /work/goal.json --manifest /work/manifest.json --trust /work/approver.pub --receipt /work/r.json -- true"),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        v.receipt("r.json")["predicate"]["outcome"]["class"],
        "exited"
    );
}

/// The `governed-tests` job's shell lines from the shipped
/// ci/gitlab-ci.yml (`before_script`, then `script`), each continuation
/// joined, without the two that install governed-exec (the image has it),
/// and its `variables`.
fn gitlab_job(yaml: &str) -> (Vec<String>, Vec<(String, String)>) {
    let job: Vec<&str> = yaml
        .lines()
        .skip_while(|l| *l != "governed-tests:")
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' ') || l.starts_with('#'))
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    let (mut lines, mut vars) = (Vec::<String>::new(), Vec::new());
    let mut section = "";
    for l in job {
        let t = l.trim();
        if !l.starts_with("    ") && t.ends_with(':') {
            section = t.trim_end_matches(':');
        } else if section == "variables" && t.contains(": ") {
            let (k, v) = t.split_once(": ").unwrap();
            vars.push((k.to_string(), v.trim_matches('"').to_string()));
        } else if section == "before_script" || section == "script" {
            if let Some(item) = t.strip_prefix("- ") {
                lines.push(item.to_string());
            } else if !t.is_empty() {
                let last = lines.last_mut().expect("a continuation after an item");
                last.push(' ');
                last.push_str(t);
            }
        }
    }
    lines.retain(|l| !l.contains("GOVERNED_EXEC_REPO") && !l.contains("install -m 0755"));
    (lines, vars)
}

/// The host's rustup toolchain: (the dir holding `rustup`, RUSTUP_HOME).
fn host_toolchain() -> Option<(PathBuf, PathBuf)> {
    let rustup = std::env::var("PATH")
        .ok()?
        .split(':')
        .map(|d| Path::new(d).join("rustup"))
        .find(|p| p.is_file())?;
    let home = Command::new(&rustup).args(["show", "home"]).output().ok()?;
    let home = PathBuf::from(String::from_utf8_lossy(&home.stdout).trim());
    home.is_dir()
        .then(|| (rustup.parent().unwrap().to_path_buf(), home))
}

/// The shipped GitLab flow, exactly as ci/gitlab-ci.yml says,
/// in a container of a FROM-scratch image under Docker's defaults (no
/// CAP_SYS_ADMIN, clone3 filtered, read-only cgroupfs), the job as root in
/// the container, the lease's `as_user 1000` and write scope on the child,
/// the shipped ci/governed-step.sh running a real nested `cargo test
/// --locked` with the CI image's toolchain layout (/usr/local/cargo,
/// /usr/local/rustup, here the host's, read-only), and the PostgreSQL
/// ledger over TLS with `PGSSLMODE=verify-full` and the committed
/// ci/ledger-ca.pem. The project is a one-test crate (the real one's suite
/// cannot nest in itself); every ci/ file is the shipped one.
#[test]
fn the_shipped_gitlab_job_runs_its_real_cargo_test_in_a_container() {
    const NAME: &str = "the_shipped_gitlab_job_runs_its_real_cargo_test_in_a_container";
    if !is_root() {
        skip!("{NAME}: needs root (Docker, a chown to uid 1000)");
        return;
    }
    let image = require_docker!(NAME);
    let cluster = |k: &str| std::env::var(k).ok();
    let (Some(ca), Some(password)) = (cluster("GOVERNED_EXEC_TEST_PG_CA"), cluster("PGPASSWORD"))
    else {
        skip!("{NAME}: no PostgreSQL test cluster with TLS (scripts/test.sh starts one)");
        return;
    };
    let Some((cargo_bin, rustup_home)) = host_toolchain() else {
        skip!("{NAME}: no rustup toolchain on PATH");
        return;
    };
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shipped = |rel: &str| std::fs::read_to_string(repo.join(rel)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let at = |rel: &str| dir.path().join(rel);
    let origin = at("origin");
    std::fs::create_dir_all(origin.join("ci")).unwrap();
    std::fs::create_dir_all(origin.join("src")).unwrap();
    if !git(&origin, &["init", "-q"]) {
        skip!("{NAME}: git is not installed");
        return;
    }
    let ledger = test_cluster_ledger("ge_gitlab").expect("the test cluster's address");
    let shipped_ledger = "postgres://ledger.example.internal:5432/governed_exec";
    // The project: the shipped ci/ files, a one-test crate, the ledger's CA.
    for f in [
        "ci/goal.json",
        "ci/governed-step.sh",
        "ci/gitlab-ci.yml",
        ".gitignore",
    ] {
        std::fs::copy(repo.join(f), origin.join(f)).unwrap();
    }
    std::fs::write(
        origin.join("ci/approvals.toml"),
        shipped("ci/approvals.toml").replace(shipped_ledger, &ledger),
    )
    .unwrap();
    std::fs::copy(&ca, origin.join("ci/ledger-ca.pem")).unwrap();
    std::fs::write(
        origin.join("Cargo.toml"),
        "[package]\nname = \"shipped-step-probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        origin.join("Cargo.lock"),
        "# This file is automatically @generated by Cargo.\n# It is not intended for manual editing.\nversion = 4\n\n[[package]]\nname = \"shipped-step-probe\"\nversion = \"0.1.0\"\n",
    )
    .unwrap();
    std::fs::write(
        origin.join("src/lib.rs"),
        "pub fn add(a: u32, b: u32) -> u32 { a + b }\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() { assert_eq!(super::add(2, 2), 4); }\n}\n",
    )
    .unwrap();
    // The approver, once, on their machine: keys, the approvals file.
    for k in ["approver", "ci-runner"] {
        assert!(output(cmd().arg("keygen").arg("--out").arg(at(k)))
            .status
            .success());
    }
    std::fs::copy(at("approver.pub"), origin.join("ci/approver.pub")).unwrap();
    std::fs::copy(at("ci-runner.pub"), origin.join("ci/runner.pub")).unwrap();
    let o = output(
        cmd()
            .current_dir(&origin)
            .args([
                "approve",
                "--file",
                "ci/approvals.toml",
                "--manifest",
                "ci/manifest.json",
                "--key",
            ])
            .arg(at("approver.key")),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(git(&origin, &["add", "-A"]) && git(&origin, &["commit", "-qm", "ci"]));
    assert!(git(
        dir.path(),
        &["clone", "-q", origin.to_str().unwrap(), "project"]
    ));
    // The CI secret (a file variable), readable by the job's root only.
    std::fs::create_dir(at("secrets")).unwrap();
    std::fs::copy(at("ci-runner.key"), at("secrets/runner.key")).unwrap();

    // The job, line by line as the YAML has it; the approvals job's check first.
    let (lines, vars) = gitlab_job(&shipped("ci/gitlab-ci.yml"));
    assert!(
        lines.iter().any(|l| l.starts_with("governed-exec run ")),
        "{lines:?}"
    );
    let check =
        "governed-exec approve --file ci/approvals.toml --manifest ci/manifest.json --check";
    assert!(shipped("ci/gitlab-ci.yml").contains(check));
    let script = std::iter::once(check.to_string())
        .chain(lines)
        .collect::<Vec<_>>()
        .join("\n");
    let mut args: Vec<String> = ["run", "--rm", "--network", "host", "-w", "/builds/project"]
        .map(String::from)
        .to_vec();
    let mut mount = |host: &Path, inside: &str, ro: bool| {
        args.push("-v".into());
        args.push(format!(
            "{}:{inside}{}",
            host.display(),
            if ro { ":ro" } else { "" }
        ));
    };
    mount(&at("project"), "/builds/project", false);
    mount(&at("secrets"), "/run/secrets", true);
    // The CI image's toolchain layout, and what cargo links with.
    mount(&cargo_bin, "/usr/local/cargo/bin", true);
    mount(&rustup_home, "/usr/local/rustup", true);
    for d in ["/usr/bin", "/usr/lib", "/usr/libexec", "/etc/alternatives"] {
        if Path::new(d).is_dir() {
            mount(Path::new(d), d, true);
        }
    }
    mount(Path::new("/usr/lib"), "/lib", true);
    if Path::new("/usr/lib64").is_dir() {
        mount(Path::new("/usr/lib64"), "/lib64", true);
    }
    let mut env = |k: &str, v: &str| {
        args.push("-e".into());
        args.push(format!("{k}={v}"));
    };
    for (k, v) in &vars {
        match k.as_str() {
            "GOVERNED_EXEC_LEDGER" => env(k, &v.replace(shipped_ledger, &ledger)),
            // The test cluster's one role.
            "PGUSER" => env(k, "postgres"),
            _ => env(k, v),
        }
    }
    env("PGPASSWORD", &password);
    env("CI_PROJECT_DIR", "/builds/project");
    env("GOVERNED_EXEC_RUNNER_KEY", "/run/secrets/runner.key");
    args.extend(["--entrypoint", "/bin/sh", &image, "-ec", &script].map(String::from));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = docker(&refs);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(err.contains("test tests::adds ... ok"), "{err}");
    assert_eq!(out.lines().last(), Some("VERIFIED_DONE"), "{out}");
    let stmt = decode_envelope(&std::fs::read(at("project/receipt.json")).unwrap());
    let p = &stmt["predicate"];
    assert_eq!(p["binding"], "portable");
    assert_eq!(p["isolation"]["uid"], 1000, "{}", p["isolation"]);
    assert_eq!(
        p["signing"]["key_out_of_child_reach"], true,
        "{}",
        p["signing"]
    );
    assert_eq!(p["outcome"]["class"], "exited");
}
