//! `scripts/bench.sh` runs this: whole-process timings of governed-exec
//! against the bare command, `timeout` and `env -i`, paired and interleaved
//! in one run, medians of many repetitions. Prints one line per target.
//!
//! Usage: cargo bench --bench governed -- BINARY [REPS]

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Fixture {
    dir: tempfile::TempDir,
    bin: PathBuf,
}

impl Fixture {
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn ge(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    }

    fn approve(&self, goal: &str, flags: &[&str], cmd: &[&str]) {
        let ok = self
            .ge()
            .arg("approve")
            .arg("--goal")
            .arg(self.path(goal))
            .arg("--workspace")
            .arg(self.path("ws"))
            .arg("--manifest")
            .arg(self.path("manifest.json"))
            .arg("--key")
            .arg(self.path("approver.key"))
            .args(["--ttl", "2h"])
            .args(flags)
            .arg("--")
            .args(cmd)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "approve {cmd:?} failed");
    }

    fn run(&self, goal: &str, cmd: &[&str]) -> Command {
        let mut c = self.ge();
        c.arg("run")
            .arg("--goal")
            .arg(self.path(goal))
            .arg("--manifest")
            .arg(self.path("manifest.json"))
            .arg("--trust")
            .arg(self.path("approver.pub"))
            .arg("--state-dir")
            .arg(self.path("state"))
            .arg("--receipt")
            .arg(self.path("receipt.json"))
            .arg("--")
            .args(cmd);
        c
    }
}

fn time(c: &mut Command) -> Duration {
    let t = Instant::now();
    let st = c.status().expect("spawn");
    let d = t.elapsed();
    assert!(st.success() || st.code() == Some(124), "{c:?} failed: {st}");
    d
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Interleave the commands round-robin `reps` times; medians in order.
fn paired(reps: usize, cmds: &mut [Command]) -> Vec<Duration> {
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); cmds.len()];
    for _ in 0..reps {
        for (i, c) in cmds.iter_mut().enumerate() {
            samples[i].push(time(c));
        }
    }
    samples.into_iter().map(median).collect()
}

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

fn quiet(prog: &str, args: &[&str]) -> Command {
    let mut c = Command::new(prog);
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn peak_rss_children_kib() -> i64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .map(|u| u.max_rss())
        .unwrap_or(-1)
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let bin = PathBuf::from(args.next().expect("usage: governed BINARY [REPS]"));
    let reps: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(200);
    let f = Fixture {
        dir: tempfile::tempdir().expect("tempdir"),
        bin,
    };
    std::fs::create_dir(f.path("ws")).expect("ws");
    assert!(f
        .ge()
        .arg("keygen")
        .arg("--out")
        .arg(f.path("approver"))
        .status()
        .expect("keygen")
        .success());
    std::fs::write(
        f.path("goal.json"),
        r#"{"schema":"governed-exec/goal/v1","id":"bench","revision":1,"criteria":[{"kind":"exit_code","equals":0}]}"#,
    )
    .expect("goal");
    let uses = (reps * 4 + 50).to_string();

    // 1. Fixed cost of a governed run of /bin/true.
    f.approve("goal.json", &["--uses", &uses], &["/bin/true"]);
    let mut cmds = [
        quiet("/bin/true", &[]),
        quiet("timeout", &["10", "/bin/true"]),
        quiet("env", &["-i", "/bin/true"]),
        f.run("goal.json", &["/bin/true"]),
    ];
    let m = paired(reps, &mut cmds);
    println!(
        "1. governed run of /bin/true: {:.3} ms median | bare {:.3} ms ({:.2}x) | timeout 10 {:.3} ms (ratio {:.2}, target <= 1.0) | env -i {:.3} ms ({:.2}x)",
        ms(m[3]), ms(m[0]), ms(m[3]) / ms(m[0]), ms(m[1]), ms(m[3]) / ms(m[1]), ms(m[2]), ms(m[3]) / ms(m[2])
    );

    // 2. Draining and hashing 1 GiB of output.
    f.approve(
        "goal.json",
        &["--uses", &uses, "--output-cap", "2GiB"],
        &["head", "-c", "1G", "/dev/zero"],
    );
    let big_reps = (reps / 40).max(3);
    let mut cmds = [
        sh("head -c 1G /dev/zero | openssl dgst -sha256"),
        f.run("goal.json", &["head", "-c", "1G", "/dev/zero"]),
    ];
    let m = paired(big_reps, &mut cmds);
    let gib = 1.0f64;
    println!(
        "2. drain+hash 1 GiB: governed {:.2} GiB/s | head|openssl dgst {:.2} GiB/s | ratio {:.2} (target >= 0.9) | peak RSS of any child so far {} KiB (target <= 16384)",
        gib / m[1].as_secs_f64(), gib / m[0].as_secs_f64(), m[0].as_secs_f64() / m[1].as_secs_f64(), peak_rss_children_kib()
    );

    // 3. Identity hashing of a 256 MiB executable.
    let big = f.path("ws/big.sh");
    let mut body = b"#!/bin/true\n".to_vec();
    body.resize(256 << 20, b'#');
    std::fs::write(&big, &body).expect("big");
    let small = f.path("ws/small.sh");
    std::fs::write(&small, b"#!/bin/true\n").expect("small");
    for p in [&big, &small] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }
    f.approve("goal.json", &["--uses", &uses], &["./big.sh"]);
    f.approve("goal.json", &["--uses", &uses], &["./small.sh"]);
    let big_s = big.to_string_lossy().to_string();
    let mut cmds = [
        quiet("openssl", &["dgst", "-sha256", &big_s]),
        f.run("goal.json", &["./big.sh"]),
        f.run("goal.json", &["./small.sh"]),
        f.run("goal.json", &["/bin/true"]),
    ];
    let m = paired(big_reps * 2, &mut cmds);
    let hash_cost = m[1].saturating_sub(m[2]);
    println!(
        "3. identity hash of 256 MiB: governed adds {:.1} ms | openssl dgst {:.1} ms | ratio {:.2} (target >= 0.9) | small script vs /bin/true: {:+.3} ms",
        ms(hash_cost), ms(m[0]), ms(m[0]) / ms(hash_cost).max(0.001), ms(m[2]) - ms(m[3])
    );

    // 4. Kill and confirm a 1000-process tree at timeout (grace 0).
    let tree = "i=0; while [ $i -lt 1000 ]; do sleep 1000 & i=$((i+1)); done; wait";
    f.approve(
        "goal.json",
        &[
            "--uses",
            &uses,
            "--wall-time",
            "3s",
            "--kill-grace",
            "0ms",
            "--max-processes",
            "4000",
        ],
        &["sh", "-c", tree],
    );
    let mut samples = Vec::new();
    for _ in 0..3 {
        let d = time(&mut f.run("goal.json", &["sh", "-c", tree]));
        samples.push(d.saturating_sub(Duration::from_secs(3)));
    }
    let receipt: serde_json::Value =
        serde_json::from_slice(&std::fs::read(f.path("receipt.json")).expect("receipt"))
            .expect("json");
    let _ = receipt;
    println!(
        "4. kill+confirm 1000-process tree after the deadline: {:.1} ms median (target <= 100 ms)",
        ms(median(samples))
    );

    // 5. Receipt size and verify time vs output volume.
    f.approve(
        "goal.json",
        &["--uses", &uses, "--output-cap", "1GiB"],
        &["head", "-c", "1M", "/dev/zero"],
    );
    f.approve(
        "goal.json",
        &["--uses", &uses, "--output-cap", "1GiB"],
        &["head", "-c", "256M", "/dev/zero"],
    );
    let mut sizes = Vec::new();
    let mut verify_times = Vec::new();
    for (i, n) in ["1M", "256M"].iter().enumerate() {
        assert!(f
            .run("goal.json", &["head", "-c", n, "/dev/zero"])
            .status()
            .expect("run")
            .success());
        let saved = f.path(&format!("r{i}.json"));
        std::fs::copy(f.path("receipt.json"), &saved).expect("copy");
        sizes.push(std::fs::metadata(&saved).expect("meta").len());
        let mut v = f.ge();
        v.arg("verify")
            .arg("--goal")
            .arg(f.path("goal.json"))
            .arg("--receipt")
            .arg(&saved)
            .arg("--trust")
            .arg(f.path("state/runner.pub"));
        verify_times.push(v);
    }
    let m = paired(reps / 4 + 5, &mut verify_times);
    println!(
        "5. receipt size 1 MiB output {} B vs 256 MiB output {} B | verify {:.3} ms vs {:.3} ms (ratio {:.2}, target ~1.0)",
        sizes[0], sizes[1], ms(m[0]), ms(m[1]), ms(m[1]) / ms(m[0])
    );
    let _ = Path::new(".");
}
