//! `scripts/bench.sh` runs this: whole-process timings of governed-exec
//! against the commands each target names, measured side by side
//! (interleaved round-robin, medians) in one run. Prints one line per figure,
//! then a table of the targets and whether each holds.
//!
//! Usage: cargo bench --bench governed -- --bin BINARY [--dynamic BINARY]
//!        [--baseline BINARY] [--quick] [--reps N] [--history N] [--rss-history N] [--leases N]
//!        [--rounds N] [--dir DIR]
//!
//! `--baseline` adds an earlier build (say, main before a change) beside the
//! current one in the fixed-cost figures, with its own manifest and state.
//!
//! Also `--rss-of CMD [ARG...]`: run CMD and print the peak RSS (KiB) of it
//! and its descendants, so each RSS figure belongs to one command alone;
//! and `--accounting-only [--reps N]`: only figure 8, the per-run cost of
//! reading a run's resource counters (no binary needed).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Opts {
    bin: PathBuf,
    dynamic: Option<PathBuf>,
    baseline: Option<PathBuf>,
    floor: Option<PathBuf>,
    fixed_only: bool,
    quick: bool,
    reps: usize,
    history: usize,
    rss_history: usize,
    leases: usize,
    rounds: usize,
    dir: PathBuf,
}

fn parse_opts(args: Vec<String>) -> Opts {
    let quick = args.iter().any(|a| a == "--quick");
    let mut o = Opts {
        bin: PathBuf::new(),
        dynamic: None,
        baseline: None,
        floor: None,
        fixed_only: false,
        quick,
        reps: if quick { 40 } else { 200 },
        history: if quick { 400 } else { 3000 },
        rss_history: if quick { 1000 } else { 10_000 },
        leases: if quick { 300 } else { 1000 },
        rounds: if quick { 6 } else { 20 },
        dir: std::env::temp_dir(),
    };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--bin" => o.bin = PathBuf::from(val()),
            "--dynamic" => o.dynamic = Some(PathBuf::from(val())),
            "--baseline" => o.baseline = Some(PathBuf::from(val())),
            "--floor" => o.floor = Some(PathBuf::from(val())),
            "--fixed-only" => o.fixed_only = true,
            "--reps" => o.reps = val().parse().expect("--reps N"),
            "--history" => o.history = val().parse().expect("--history N"),
            "--rss-history" => o.rss_history = val().parse().expect("--rss-history N"),
            "--leases" => o.leases = val().parse().expect("--leases N"),
            "--rounds" => o.rounds = val().parse().expect("--rounds N"),
            "--dir" => o.dir = PathBuf::from(val()),
            "--quick" | "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(!o.bin.as_os_str().is_empty(), "--bin BINARY is required");
    // The floor runs with the workspace as its cwd: a relative path would
    // name nothing there.
    o.floor = o.floor.map(|f| std::fs::canonicalize(&f).unwrap_or(f));
    o.history = o.history.max(200);
    o.rss_history = o.rss_history.max(o.history);
    o
}

/// One workspace, approver key and goal files; state dirs and manifests are
/// per figure so that no figure's journal or manifest grows another's.
struct Fixture {
    dir: tempfile::TempDir,
    bin: PathBuf,
}

impl Fixture {
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn ge_with(&self, bin: &Path) -> Command {
        let mut c = Command::new(bin);
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    }

    fn ge(&self) -> Command {
        self.ge_with(&self.bin)
    }

    fn goal(&self, id: &str) -> String {
        let name = format!("goal-{id}.json");
        std::fs::write(
            self.path(&name),
            format!(
                r#"{{"schema":"governed-exec/goal/v1","id":"{id}","revision":1,"criteria":[{{"kind":"exit_code","equals":0}}]}}"#
            ),
        )
        .expect("goal");
        name
    }

    fn approve(&self, goal: &str, manifest: &str, flags: &[&str], cmd: &[&str]) {
        self.approve_with(&self.bin, goal, manifest, flags, cmd);
    }

    fn approve_with(&self, bin: &Path, goal: &str, manifest: &str, flags: &[&str], cmd: &[&str]) {
        let ok = self
            .ge_with(bin)
            .arg("approve")
            .arg("--goal")
            .arg(self.path(goal))
            .arg("--workspace")
            .arg(self.path("ws"))
            .arg("--manifest")
            .arg(self.path(manifest))
            .arg("--key")
            .arg(self.path("approver.key"))
            .args(["--ttl", "24h"])
            .args(flags)
            .arg("--")
            .args(cmd)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "approve {cmd:?} failed");
    }

    /// A `run` whose receipt goes to stdout (/dev/null), state in `state`.
    fn run_with(
        &self,
        bin: &Path,
        goal: &str,
        manifest: &str,
        state: &Path,
        cmd: &[&str],
    ) -> Command {
        let mut c = self.ge_with(bin);
        c.arg("run")
            .arg("--goal")
            .arg(self.path(goal))
            .arg("--manifest")
            .arg(self.path(manifest))
            .arg("--trust")
            .arg(self.path("approver.pub"))
            .arg("--state-dir")
            .arg(state)
            .arg("--")
            .args(cmd);
        c
    }

    fn run(&self, goal: &str, manifest: &str, state: &str, cmd: &[&str]) -> Command {
        self.run_with(&self.bin, goal, manifest, &self.path(state), cmd)
    }
}

fn time(c: &mut Command) -> Duration {
    let t = Instant::now();
    let st = c.status().expect("spawn");
    let d = t.elapsed();
    assert!(st.success(), "{c:?} failed: {st}");
    d
}

/// Interleave the commands round-robin `reps` times, whatever their exit
/// status; medians in order.
fn paired_any(reps: usize, cmds: &mut [Command]) -> Vec<Duration> {
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); cmds.len()];
    for _ in 0..reps {
        for (i, c) in cmds.iter_mut().enumerate() {
            let t = Instant::now();
            let _ = c.status().expect("spawn");
            samples[i].push(t.elapsed());
        }
    }
    samples.into_iter().map(median).collect()
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

/// Wall time (median), CPU and page faults (means) of one command.
struct Usage {
    wall: Duration,
    cpu_ms: f64,
    faults: f64,
}

/// The children's CPU (ms) and page faults (minor + major) so far.
fn children_usage() -> (f64, f64) {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage");
    let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1000.0 + t.tv_usec() as f64 / 1000.0;
    (
        tv(u.user_time()) + tv(u.system_time()),
        (u.minor_page_faults() + u.major_page_faults()) as f64,
    )
}

/// Like [`paired`], with each command's CPU and page faults per run (the
/// command and every descendant it waited for).
fn paired_usage(reps: usize, cmds: &mut [Command]) -> Vec<Usage> {
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); cmds.len()];
    let mut sums = vec![(0.0, 0.0); cmds.len()];
    for _ in 0..reps {
        for (i, c) in cmds.iter_mut().enumerate() {
            let before = children_usage();
            samples[i].push(time(c));
            let after = children_usage();
            sums[i].0 += after.0 - before.0;
            sums[i].1 += after.1 - before.1;
        }
    }
    samples
        .into_iter()
        .zip(sums)
        .map(|(s, (cpu, faults))| Usage {
            wall: median(s),
            cpu_ms: cpu / reps as f64,
            faults: faults / reps as f64,
        })
        .collect()
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

/// Peak RSS (KiB) of `cmd` and its descendants: a fresh copy of this
/// program runs it (`--rss-of`), so no other child's RSS is counted.
fn peak_rss_kib(cmd: &Command) -> u64 {
    let me = std::env::current_exe().expect("current_exe");
    let out = Command::new(me)
        .arg("--rss-of")
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("rss-of");
    assert!(out.status.success(), "rss-of {cmd:?} failed");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("rss")
}

fn rss_of(args: &[String]) -> ! {
    let st = Command::new(&args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn");
    let kib = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .map(|u| u.max_rss())
        .unwrap_or(-1);
    println!("{kib}");
    std::process::exit(if st.success() { 0 } else { 1 })
}

/// The filesystem type of `dir` as `stat -f` names it.
fn fs_type(dir: &Path) -> String {
    Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(dir)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Whether an ELF file asks for a dynamic loader (has a PT_INTERP segment).
fn is_dynamic(bin: &Path) -> bool {
    let b = std::fs::read(bin).expect("read binary");
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    (0..phnum).any(|i| {
        let o = phoff + i * phentsize;
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) == 3
    })
}

struct Target {
    name: String,
    figure: String,
    holds: bool,
}

struct Report {
    targets: Vec<Target>,
}

impl Report {
    fn print(&self) {
        println!();
        println!("| target | measured | holds |");
        println!("|---|---|---|");
        for t in &self.targets {
            println!(
                "| {} | {} | {} |",
                t.name,
                t.figure,
                if t.holds { "yes" } else { "no" }
            );
        }
        let held = self.targets.iter().filter(|t| t.holds).count();
        println!("{held} of {} targets hold", self.targets.len());
    }

    fn target(&mut self, name: &str, figure: String, holds: bool) {
        println!("   -> {}: {name}", if holds { "HOLDS" } else { "MISSES" });
        self.targets.push(Target {
            name: name.into(),
            figure,
            holds,
        });
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--rss-of") {
        rss_of(&args[i + 1..]);
    }
    if args.iter().any(|a| a == "--accounting-only") {
        // No binary needed: the figure calls the library.
        let mut o = parse_opts(vec!["--bin".into(), "-".into(), "--quick".into()]);
        if let Some(i) = args.iter().position(|a| a == "--reps") {
            o.reps = args[i + 1].parse().expect("--reps N");
        }
        let mut rep = Report { targets: vec![] };
        accounting_cost(&o, &mut rep);
        return;
    }
    let o = parse_opts(args);
    std::fs::create_dir_all(&o.dir).expect("bench dir");
    let f = Fixture {
        dir: tempfile::Builder::new()
            .prefix("governed-bench-")
            .tempdir_in(&o.dir)
            .expect("tempdir"),
        bin: o.bin.clone(),
    };
    let shm = tempfile::Builder::new()
        .prefix("governed-bench-")
        .tempdir_in("/dev/shm")
        .ok();
    std::fs::create_dir(f.path("ws")).expect("ws");
    assert!(f
        .ge()
        .arg("keygen")
        .arg("--out")
        .arg(f.path("approver"))
        .status()
        .expect("keygen")
        .success());
    let mut rep = Report { targets: vec![] };
    let state_fs = fs_type(f.dir.path());
    println!(
        "binary {} ({}); state dirs under {} ({}){}; reps {}, history {}/{}, leases {}, rounds {}{}",
        o.bin.display(),
        if is_dynamic(&o.bin) { "dynamic" } else { "static" },
        f.dir.path().display(),
        state_fs,
        if state_fs == "tmpfs" { " — WARNING: not a normal disk, the fsyncs cost nothing here" } else { "" },
        o.reps,
        o.history,
        o.rss_history,
        o.leases,
        o.rounds,
        if o.quick { " (quick mode)" } else { "" },
    );

    // 1. Fixed cost: a governed run of /bin/true, state on the normal disk
    //    (write-ahead record fdatasync'd), beside its floor (benches/floor.rs),
    //    timeout/bare/env -i, the same run with state on tmpfs, with
    //    --receipt, the dynamic build, and with --no-network --pid-namespace
    //    beside bubblewrap doing the same. CPU and page faults per run come
    //    from getrusage(RUSAGE_CHILDREN) around each command (the command and
    //    every descendant it waited for).
    let g1 = f.goal("fixed");
    let uses = (o.reps * 8 + 50).to_string();
    f.approve(&g1, "m-fixed.json", &["--uses", &uses], &["/bin/true"]);
    f.approve(
        &g1,
        "m-fixed-iso.json",
        &["--uses", &uses, "--no-network", "--pid-namespace"],
        &["/bin/true"],
    );
    let t = ["/bin/true"];
    let unshare_works = quiet("unshare", &["-Upnf", "/bin/true"])
        .status()
        .is_ok_and(|s| s.success());
    let bwrap_args = [
        "--dev-bind",
        "/",
        "/",
        "--unshare-net",
        "--unshare-pid",
        "/bin/true",
    ];
    let bwrap_works = quiet("bwrap", &bwrap_args)
        .status()
        .is_ok_and(|s| s.success());
    let mut names: Vec<&str> = vec![
        "bare /bin/true",
        "timeout 10 /bin/true",
        "env -i /bin/true",
        "governed run (state on disk)",
    ];
    let mut cmds = vec![
        quiet("/bin/true", &[]),
        quiet("timeout", &["10", "/bin/true"]),
        quiet("env", &["-i", "/bin/true"]),
        f.run(&g1, "m-fixed.json", "s-fixed", &t),
    ];
    let (i_timeout, i_gov) = (1, 3);
    let i_floor = o.floor.as_ref().map(|fl| {
        let dir = f.path("floor");
        let ok = quiet(fl.to_str().expect("utf-8 path"), &[])
            .arg("--setup")
            .arg(&dir)
            .args(["--", "/bin/true"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "floor --setup failed");
        let mut c = Command::new(fl);
        c.arg(&dir)
            .current_dir(f.path("ws"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmds.push(c);
        names.push("floor (benches/floor.rs, state on disk)");
        cmds.len() - 1
    });
    let mut receipt_run = f.ge();
    receipt_run
        .arg("run")
        .arg("--goal")
        .arg(f.path(&g1))
        .arg("--manifest")
        .arg(f.path("m-fixed.json"))
        .arg("--trust")
        .arg(f.path("approver.pub"))
        .arg("--state-dir")
        .arg(f.path("s-fixed-r"))
        .arg("--receipt")
        .arg(f.path("receipt-fixed.json"))
        .arg("--")
        .args(t);
    cmds.push(receipt_run);
    names.push("governed run --receipt FILE (state on disk)");
    if let Some(shm) = &shm {
        cmds.push(f.run_with(&o.bin, &g1, "m-fixed.json", &shm.path().join("s"), &t));
        names.push("governed run (state on tmpfs)");
    }
    if let Some(d) = &o.dynamic {
        cmds.push(f.run_with(d, &g1, "m-fixed.json", &f.path("s-fixed-dyn"), &t));
        names.push("governed run, dynamic build (state on disk)");
    }
    let i_base = o.baseline.as_ref().map(|b| {
        f.approve_with(
            b,
            &g1,
            "m-fixed-base.json",
            &["--uses", &uses],
            &["/bin/true"],
        );
        cmds.push(f.run_with(b, &g1, "m-fixed-base.json", &f.path("s-fixed-base"), &t));
        names.push("baseline build (state on disk)");
        cmds.len() - 1
    });
    if unshare_works {
        cmds.push(quiet("unshare", &["-Upnf", "/bin/true"]));
        names.push("unshare -Upnf /bin/true");
    }
    let i_bwrap = bwrap_works.then(|| {
        cmds.push(quiet("bwrap", &bwrap_args));
        names.push("bwrap --dev-bind / / --unshare-net --unshare-pid");
        cmds.len() - 1
    });
    cmds.push(f.run(&g1, "m-fixed-iso.json", "s-fixed-iso", &t));
    names.push("governed run --no-network --pid-namespace");
    let i_iso = cmds.len() - 1;
    let i_base_iso = o.baseline.as_ref().map(|b| {
        f.approve_with(
            b,
            &g1,
            "m-fixed-base-iso.json",
            &["--uses", &uses, "--no-network", "--pid-namespace"],
            &["/bin/true"],
        );
        cmds.push(f.run_with(
            b,
            &g1,
            "m-fixed-base-iso.json",
            &f.path("s-fixed-base-iso"),
            &t,
        ));
        names.push("baseline --no-network --pid-namespace");
        cmds.len() - 1
    });
    let m = paired_usage(o.reps, &mut cmds);
    let timeout = m[i_timeout].wall;
    println!("1. fixed cost of one run ({} interleaved rounds, medians; ratio to `timeout 10 /bin/true`; CPU and page faults per run, means):", o.reps);
    for (n, s) in names.iter().zip(&m) {
        println!(
            "   {n:<50} {:>8.3} ms  {:>5.2}x   cpu {:>6.3} ms   faults {:>6.1}",
            ms(s.wall),
            ms(s.wall) / ms(timeout),
            s.cpu_ms,
            s.faults
        );
    }
    let gov = &m[i_gov];
    let r1 = ms(gov.wall) / ms(timeout);
    if let Some(i) = i_floor {
        let r = ms(gov.wall) / ms(m[i].wall);
        rep.target(
            "run of /bin/true, state on disk <= 1.15x the floor",
            format!(
                "{r:.2}x ({:.3} ms vs {:.3} ms)",
                ms(gov.wall),
                ms(m[i].wall)
            ),
            r <= 1.15,
        );
    }
    rep.target(
        "run of /bin/true, state on disk, durable write-ahead <= 1.5x timeout",
        format!("{r1:.2}x ({:.3} ms vs {:.3} ms)", ms(gov.wall), ms(timeout)),
        r1 <= 1.5,
    );
    match i_bwrap {
        Some(i) => {
            let r = ms(m[i_iso].wall) / ms(m[i].wall);
            rep.target(
                "run with --no-network --pid-namespace <= 1.0x bwrap --unshare-net --unshare-pid",
                format!(
                    "{r:.2}x ({:.3} ms vs {:.3} ms)",
                    ms(m[i_iso].wall),
                    ms(m[i].wall)
                ),
                r <= 1.0,
            );
        }
        None => println!("   bwrap: SKIP (not installed, or it cannot make namespaces here)"),
    }
    rep.target(
        "CPU per run of /bin/true <= 2.0 ms",
        format!(
            "{:.3} ms (timeout {:.3} ms)",
            gov.cpu_ms, m[i_timeout].cpu_ms
        ),
        gov.cpu_ms <= 2.0,
    );
    let rf = gov.faults / m[i_timeout].faults.max(1.0);
    rep.target(
        "page faults per run <= 1.3x timeout's",
        format!("{rf:.2}x ({:.0} vs {:.0})", gov.faults, m[i_timeout].faults),
        rf <= 1.3,
    );
    if let Some(i) = i_base {
        println!(
            "   A/B: this build / baseline {:.3}x wall, cpu {:.3} vs {:.3} ms, faults {:.0} vs {:.0}",
            ms(gov.wall) / ms(m[i].wall),
            gov.cpu_ms,
            m[i].cpu_ms,
            gov.faults,
            m[i].faults
        );
    }
    if let Some(i) = i_base_iso {
        println!(
            "   A/B isolated: this build / baseline {:.3}x wall, cpu {:.3} vs {:.3} ms",
            ms(m[i_iso].wall) / ms(m[i].wall),
            m[i_iso].cpu_ms,
            m[i].cpu_ms
        );
    }
    if let Some(i) = names.iter().position(|n| n.contains("dynamic")) {
        let r = ms(m[i].wall) / ms(gov.wall);
        println!("   dynamic / static build: {r:.2}x");
        rep.target(
            "the binary README's build gives is the fast one (static <= dynamic)",
            format!(
                "dynamic {:.3} ms vs static {:.3} ms ({r:.2}x)",
                ms(m[i].wall),
                ms(gov.wall)
            ),
            !is_dynamic(&o.bin) && r >= 1.0,
        );
    }
    if o.fixed_only {
        rep.print();
        return;
    }

    cheap_wins(&f, &o);
    accounting_cost(&o, &mut rep);

    // 2. Flat in journal length: grow one goal's journal to history-100
    //    runs, then interleave its last 100 runs with the first 100 runs of
    //    a fresh state dir; later grow it to rss_history for peak RSS.
    let g2 = f.goal("history");
    let uses = (o.rss_history + 400).to_string();
    f.approve(&g2, "m-history.json", &["--uses", &uses], &["/bin/true"]);
    let grow = |from: usize, to: usize| {
        let mut c = f.run(&g2, "m-history.json", "s-history", &t);
        let mut chunk = Vec::new();
        for i in from..to {
            chunk.push(time(&mut c));
            if (i + 1) % 1000 == 0 || i + 1 == to {
                println!(
                    "   growing: runs {}..{} median {:.3} ms",
                    i + 2 - chunk.len(),
                    i + 1,
                    ms(median(std::mem::take(&mut chunk)))
                );
            }
        }
    };
    println!("2. flat in journal length (one goal, {} runs):", o.history);
    grow(0, o.history - 100);
    let mut cmds = [
        f.run(&g2, "m-history.json", "s-history-fresh", &t),
        f.run(&g2, "m-history.json", "s-history", &t),
    ];
    let m = paired(100, &mut cmds);
    let r2 = ms(m[1]) / ms(m[0]);
    println!(
        "   first 100 runs {:.3} ms | last 100 of {} {:.3} ms | ratio {r2:.2}",
        ms(m[0]),
        o.history,
        ms(m[1])
    );
    rep.target(
        &format!("last 100 of {} runs <= 1.1x the first 100", o.history),
        format!("{r2:.2}x ({:.3} ms vs {:.3} ms)", ms(m[1]), ms(m[0])),
        r2 <= 1.1,
    );
    grow(o.history, o.rss_history);
    let rss_hist = (0..3)
        .map(|_| peak_rss_kib(&f.run(&g2, "m-history.json", "s-history", &t)))
        .max()
        .unwrap_or(0);
    let rss_fresh = peak_rss_kib(&f.run(&g2, "m-history.json", "s-history-fresh", &t));
    let mut cmds = [
        f.run(&g2, "m-history.json", "s-history-fresh", &t),
        f.run(&g2, "m-history.json", "s-history", &t),
    ];
    let m = paired(30, &mut cmds);
    println!(
        "   at {} prior runs: {:.3} ms vs {:.3} ms with a short journal ({:.2}x); peak RSS {} KiB (short journal: {} KiB)",
        o.rss_history + 3,
        ms(m[1]),
        ms(m[0]),
        ms(m[1]) / ms(m[0]),
        rss_hist,
        rss_fresh
    );
    rep.target(
        &format!("peak RSS at {} prior runs <= 16 MiB", o.rss_history),
        format!("{rss_hist} KiB"),
        rss_hist <= 16 * 1024,
    );

    // 3. Flat in manifest size: the same run with its lease alone in a
    //    manifest, and as the last of leases+1 in another.
    let g3 = f.goal("manifest");
    let uses = (o.reps * 2 + 50).to_string();
    f.approve(&g3, "m-one.json", &["--uses", &uses], &["/bin/true"]);
    let t0 = Instant::now();
    for i in 0..o.leases {
        f.approve(
            &g3,
            "m-big.json",
            &["--uses", "1"],
            &["/bin/true", &format!("other-{i}")],
        );
    }
    f.approve(&g3, "m-big.json", &["--uses", &uses], &["/bin/true"]);
    let made = t0.elapsed();
    // Approvals come long before runs in real use; a run indexes a manifest
    // only once its last change is 2 s old (the index's settling time), so
    // wait that out rather than measure the first seconds after approving.
    std::thread::sleep(std::time::Duration::from_millis(2200));
    let big_size = std::fs::metadata(f.path("m-big.json"))
        .map(|m| m.len())
        .unwrap_or(0);
    let mut cmds = [
        f.run(&g3, "m-one.json", "s-man-one", &t),
        f.run(&g3, "m-big.json", "s-man-big", &t),
    ];
    let m = paired(o.reps, &mut cmds);
    let r3 = ms(m[1]) / ms(m[0]);
    let rss_big = peak_rss_kib(&f.run(&g3, "m-big.json", "s-man-big", &t));
    println!(
        "3. flat in manifest size: one-lease manifest {:.3} ms | lease last of {} ({} KiB, {} approves took {:.1} s) {:.3} ms | ratio {r3:.2}; peak RSS {} KiB",
        ms(m[0]),
        o.leases + 1,
        big_size / 1024,
        o.leases + 1,
        made.as_secs_f64(),
        ms(m[1]),
        rss_big
    );
    rep.target(
        &format!(
            "run among {} other leases <= 1.15x one-lease manifest",
            o.leases
        ),
        format!("{r3:.2}x ({:.3} ms vs {:.3} ms)", ms(m[1]), ms(m[0])),
        r3 <= 1.15,
    );

    // 4. Concurrency: 12 runs of one goal (one lease, one journal) in a row
    //    vs all 12 at once; the order alternates between rounds.
    let g4 = f.goal("concurrent");
    let uses = (o.rounds * 24 + 24).to_string();
    f.approve(&g4, "m-conc.json", &["--uses", &uses], &["/bin/true"]);
    let mut seq = Vec::new();
    let mut conc = Vec::new();
    let run_seq = || {
        let t = Instant::now();
        for _ in 0..12 {
            time(&mut f.run(&g4, "m-conc.json", "s-conc", &["/bin/true"]));
        }
        t.elapsed()
    };
    let run_conc = || {
        let t = Instant::now();
        let children: Vec<Child> = (0..12)
            .map(|_| {
                f.run(&g4, "m-conc.json", "s-conc", &["/bin/true"])
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        for mut c in children {
            assert!(c.wait().expect("wait").success(), "a concurrent run failed");
        }
        t.elapsed()
    };
    for r in 0..o.rounds {
        if r % 2 == 0 {
            seq.push(run_seq());
            conc.push(run_conc());
        } else {
            conc.push(run_conc());
            seq.push(run_seq());
        }
    }
    let (s, c) = (median(seq), median(conc));
    let r4 = s.as_secs_f64() / c.as_secs_f64();
    println!(
        "4. concurrency ({} cores, {} rounds): 12 in a row {:.1} ms ({:.0} runs/s) | 12 at once {:.1} ms ({:.0} runs/s) | speed-up {r4:.2}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        o.rounds,
        ms(s),
        12.0 / s.as_secs_f64(),
        ms(c),
        12.0 / c.as_secs_f64()
    );
    rep.target(
        "12 concurrent runs of one goal >= 1.5x faster than 12 in a row",
        format!("{r4:.2}x ({:.1} ms vs {:.1} ms)", ms(c), ms(s)),
        r4 >= 1.5,
    );

    // 5. Draining and hashing 1 GiB of output.
    let g5 = f.goal("output");
    let big_reps = if o.quick { 2 } else { 5 };
    f.approve(
        &g5,
        "m-out.json",
        &["--uses", "100", "--output-cap", "2GiB"],
        &["head", "-c", "1G", "/dev/zero"],
    );
    let gib_cmd = ["head", "-c", "1G", "/dev/zero"];
    let mut cmds = [
        sh("head -c 1G /dev/zero | openssl dgst -sha256"),
        f.run(&g5, "m-out.json", "s-out", &gib_cmd),
    ];
    let m = paired(big_reps, &mut cmds);
    let r5 = m[0].as_secs_f64() / m[1].as_secs_f64();
    let rss5 = peak_rss_kib(&f.run(&g5, "m-out.json", "s-out", &gib_cmd));
    println!(
        "5. drain+hash 1 GiB: governed {:.2} GiB/s | head|openssl dgst {:.2} GiB/s | ratio {r5:.2} | peak RSS {} KiB",
        1.0 / m[1].as_secs_f64(),
        1.0 / m[0].as_secs_f64(),
        rss5
    );
    let t5 = ms(m[1]) / ms(m[0]);
    rep.target(
        "1 GiB drain+hash <= 1.11x the time of head|openssl dgst",
        format!("{t5:.2}x ({:.0} ms vs {:.0} ms)", ms(m[1]), ms(m[0])),
        t5 <= 1.11,
    );
    rep.target(
        "peak RSS <= 16 MiB while draining 1 GiB",
        format!("{rss5} KiB"),
        rss5 <= 16 * 1024,
    );

    // 6. Identity of a 256 MiB executable: what a big script costs over a
    //    small one, against `openssl dgst` of the same file.
    let g6 = f.goal("identity");
    let big = f.path("ws/big.sh");
    let mut body = b"#!/bin/true\n".to_vec();
    body.resize(256 << 20, b'#');
    std::fs::write(&big, &body).expect("big");
    drop(body);
    // Flushed before measuring: otherwise the kernel writes the fresh 256 MiB
    // back to disk during the first rounds, and that is what gets measured.
    std::fs::File::open(&big)
        .and_then(|f| f.sync_all())
        .expect("sync big");
    let small = f.path("ws/small.sh");
    std::fs::write(&small, b"#!/bin/true\n").expect("small");
    for p in [&big, &small] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }
    f.approve(&g6, "m-id.json", &["--uses", "200"], &["./big.sh"]);
    f.approve(&g6, "m-id.json", &["--uses", "200"], &["./small.sh"]);
    let big_s = big.to_string_lossy().to_string();
    let mut cmds = [
        quiet("openssl", &["dgst", "-sha256", &big_s]),
        f.run(&g6, "m-id.json", "s-id", &["./big.sh"]),
        f.run(&g6, "m-id.json", "s-id", &["./small.sh"]),
    ];
    let m = paired(big_reps * 2, &mut cmds);
    let hash_cost = m[1].saturating_sub(m[2]);
    let r6 = ms(m[0]) / ms(hash_cost).max(0.001);
    println!(
        "6. identity of a 256 MiB executable: governed adds {:.1} ms over a small script | openssl dgst {:.1} ms | ratio {r6:.2}",
        ms(hash_cost),
        ms(m[0])
    );
    rep.target(
        "256 MiB executable identity >= 0.9x openssl dgst",
        format!("{r6:.2}x ({:.0} ms vs {:.0} ms)", ms(hash_cost), ms(m[0])),
        r6 >= 0.9,
    );
    let _ = std::fs::remove_file(&big);

    if !o.quick {
        other_figures(&f);
    }

    rep.print();
}

/// The cheap savings, each measured side by side where one binary can do
/// both: private HOME/TMPDIR on tmpfs vs a disk `$TMPDIR`; a run that is due
/// to sweep stale cgroups vs one that is not; and, against `--baseline`, a
/// standard-profile run printing 1 MiB (its receipt keeps 2 x 64 KiB of
/// output and is now signed once, not twice).
fn cheap_wins(f: &Fixture, o: &Opts) {
    let g = f.goal("wins");
    let uses = (o.reps * 4 + 50).to_string();
    f.approve(&g, "m-wins.json", &["--uses", &uses], &["/bin/true"]);
    let disk_tmp = f.path("disk-tmp");
    std::fs::create_dir_all(&disk_tmp).expect("disk tmp");
    let mut on_disk = f.run(&g, "m-wins.json", "s-wins", &["/bin/true"]);
    on_disk.env("TMPDIR", &disk_tmp);
    let mut on_tmpfs = f.run(&g, "m-wins.json", "s-wins", &["/bin/true"]);
    on_tmpfs.env_remove("TMPDIR");
    // Through `sh` both, so only the marker's removal differs.
    let run_line = |pre: &str| {
        let c = f.run(&g, "m-wins.json", "s-wins-sweep", &["/bin/true"]);
        let mut words = vec![c.get_program().to_string_lossy().to_string()];
        words.extend(c.get_args().map(|a| format!("'{}'", a.to_string_lossy())));
        sh(&format!("{pre}exec {}", words.join(" ")))
    };
    let marker = f.path("s-wins-sweep/last-sweep");
    let sweeping = run_line(&format!("rm -f '{}'; ", marker.display()));
    let not_sweeping = run_line(": ; ");
    let mut cmds = [on_disk, on_tmpfs, sweeping, not_sweeping];
    let m = paired(o.reps, &mut cmds);
    println!("1b. cheap savings, each side by side ({} rounds):", o.reps);
    println!(
        "   private HOME/TMPDIR on a disk $TMPDIR {:.3} ms vs on /dev/shm {:.3} ms: saves {:.3} ms",
        ms(m[0]),
        ms(m[1]),
        ms(m[0]) - ms(m[1])
    );
    println!(
        "   sweep of crashed runners' scratch and cgroups on every run {:.3} ms vs rate-limited {:.3} ms: saves {:.3} ms",
        ms(m[2]),
        ms(m[3]),
        ms(m[2]) - ms(m[3])
    );
    if let Some(b) = &o.baseline {
        let mib = ["head", "-c", "1M", "/dev/zero"];
        f.approve(&g, "m-wins.json", &["--uses", &uses], &mib);
        f.approve_with(b, &g, "m-wins-base.json", &["--uses", &uses], &mib);
        let mut cmds = [
            f.run(&g, "m-wins.json", "s-wins-mib", &mib),
            f.run_with(b, &g, "m-wins-base.json", &f.path("s-wins-mib-base"), &mib),
        ];
        let m = paired(o.reps, &mut cmds);
        println!(
            "   standard run printing 1 MiB: {:.3} ms vs baseline build {:.3} ms ({:.2}x)",
            ms(m[0]),
            ms(m[1]),
            ms(m[0]) / ms(m[1])
        );
    }
}

/// Figures of earlier rounds that are not targets but should not
/// regress: killing a 1000-process tree, receipt size vs output volume.
fn other_figures(f: &Fixture) {
    let g = f.goal("other");
    let tree = "i=0; while [ $i -lt 1000 ]; do sleep 1000 & i=$((i+1)); done; wait";
    f.approve(
        &g,
        "m-other.json",
        &[
            "--uses",
            "10",
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
        let t = Instant::now();
        let st = f
            .run(&g, "m-other.json", "s-other", &["sh", "-c", tree])
            .status()
            .expect("run");
        assert_eq!(st.code(), Some(124), "the tree run should time out");
        samples.push(t.elapsed().saturating_sub(Duration::from_secs(3)));
    }
    println!(
        "7. (not a target) kill+confirm a 1000-process tree after the deadline: {:.1} ms median",
        ms(median(samples))
    );
    let mut sizes = Vec::new();
    let mut verifies = Vec::new();
    for (i, n) in ["1M", "256M"].iter().enumerate() {
        f.approve(
            &g,
            "m-other.json",
            &["--uses", "10", "--output-cap", "1GiB"],
            &["head", "-c", n, "/dev/zero"],
        );
        let saved = f.path(&format!("r{i}.json"));
        let out = f
            .run(
                &g,
                "m-other.json",
                "s-other",
                &["head", "-c", n, "/dev/zero"],
            )
            .stdout(Stdio::piped())
            .output()
            .expect("run");
        assert!(out.status.success());
        std::fs::write(&saved, &out.stdout).expect("receipt");
        sizes.push(out.stdout.len());
        let mut v = f.ge();
        v.arg("verify")
            .arg("--goal")
            .arg(f.path(&g))
            .arg("--receipt")
            .arg(&saved)
            .arg("--trust")
            .arg(f.path("s-other/runner.pub"));
        verifies.push(v);
    }
    let m = paired_any(30, &mut verifies);
    println!(
        "8. (not a target) receipt size, 1 MiB vs 256 MiB of output: {} B vs {} B | verify {:.3} ms vs {:.3} ms",
        sizes[0],
        sizes[1],
        ms(m[0]),
        ms(m[1])
    );
}

/// The per-run cost of reading the run's resources from its
/// cgroups (one pass over the counter files, done once after cleanup),
/// side by side with the `getrusage` it adds to, in this process, on groups
/// made exactly as `run` makes them, that a real process ran in. Also how
/// long making and removing the run's groups takes (informative).
fn accounting_cost(o: &Opts, rep: &mut Report) {
    use governed_runner::process::accounting;
    use governed_runner::process::cgroup::RunCgroups;
    let id = format!("bench-{}", std::process::id());
    let groups = RunCgroups::create(&id, Some(1024), Some(2 << 30), false);
    let dirs = groups.counter_dirs();
    let mut joins: Vec<PathBuf> = [dirs.memory_v1, dirs.cpuacct_v1, dirs.blkio_v1, dirs.pids_v1]
        .into_iter()
        .flatten()
        .map(|d| d.join("tasks"))
        .collect();
    if let Some((d, _)) = &dirs.v2 {
        joins.push(d.join("cgroup.procs"));
    }
    if joins.is_empty() {
        println!("8. resource accounting: SKIP, no cgroup can be made here (not root, or a read-only cgroupfs)");
        return;
    }
    // A process that joins every group, touches a little memory and IO,
    // and exits: the counters then hold real figures.
    let st = Command::new("sh")
        .arg("-c")
        .arg("for f in \"$@\"; do echo $$ > \"$f\"; done; head -c 4M /dev/zero | cat > /dev/null")
        .arg("sh")
        .args(&joins)
        .status()
        .expect("sh");
    assert!(st.success());
    let reps = o.reps * 10;
    let mut read = Vec::with_capacity(reps);
    let mut rusage = Vec::with_capacity(reps);
    let mut sample = None;
    for _ in 0..reps {
        let t = Instant::now();
        sample = accounting::read_counters(&groups.counter_dirs());
        read.push(t.elapsed());
        let t = Instant::now();
        let _ = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN);
        rusage.push(t.elapsed());
    }
    let (r, g) = (median(read), median(rusage));
    let mechanism = sample.as_ref().map_or("rusage", |c| c.mechanism);
    println!(
        "8. resource accounting ({mechanism}), {reps} rounds side by side: read the run's counters {:.3} ms vs getrusage {:.3} ms",
        ms(r),
        ms(g)
    );
    rep.target(
        "reading a run's resource counters <= 0.1 ms",
        format!("{:.3} ms ({mechanism}; getrusage {:.4} ms)", ms(r), ms(g)),
        r <= Duration::from_micros(100),
    );
    drop(groups);
    let mut make = Vec::new();
    for i in 0..o.reps.min(50) {
        let t = Instant::now();
        drop(RunCgroups::create(
            &format!("{id}-{i}"),
            Some(1024),
            Some(2 << 30),
            false,
        ));
        make.push(t.elapsed());
    }
    println!(
        "   (informative) make and remove the run's groups as `run` does (v2, pids, memory with its limit, blkio with its rule; cpuacct without a v2 group): {:.3} ms median",
        ms(median(make))
    );
}
