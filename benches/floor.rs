//! The floor of a governed run: only the work no governed run
//! can skip, with none of governed-exec's structure, so that
//! `scripts/bench.sh` can say how far above its own limit governed-exec is.
//!
//! One run does, in this order:
//! 1. start (the same static build as the product: `scripts/bench.sh`
//!    builds this with `scripts/build-static.sh`'s flags);
//! 2. read one lease (a signature and a body naming the executable, its
//!    argv and its SHA-256) and the approver's public key, and check the
//!    ed25519 signature;
//! 3. hash the executable while copying it into a memfd, seal the memfd,
//!    and compare the digest with the lease's;
//! 4. make the per-run cgroups the lease needs (a pids limit and a memory
//!    limit: one v2 group where the controllers are there, else one v1
//!    group in each of the `pids` and `memory` hierarchies);
//! 5. append one record to a journal and `fdatasync` it;
//! 6. clone and exec the child from the sealed memfd (the product's own
//!    `os::sys::spawn`: `clone3` with a pidfd, `execveat` of the fd, the
//!    child moving itself into the v1 groups), its stdout and stderr on
//!    pipes drained and hashed in this thread;
//! 7. wait for it, remove the groups (an `rmdir` only succeeds on an empty
//!    group: the run is gone);
//! 8. append the result record, `fdatasync`;
//! 9. sign a receipt (ed25519 over its JSON) and write it to stdout.
//!
//! It does not keep a hash chain, read history, parse a manifest or a goal,
//! lock anything, give the child a private HOME/TMPDIR, reset signals,
//! watch for cancellation or a deadline, or confirm descendants gone
//! beyond the group's emptiness: those are the product's structure, which
//! the breakdown in docs/PERFORMANCE.md prices.
//!
//! Usage: `floor --setup DIR -- EXECUTABLE [ARG...]` (keys and a lease in
//! DIR), then `floor DIR` (one run; the receipt on stdout, the journal and
//! the cgroups under DIR's name).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use governed_sys as sys;
use sha2::{Digest, Sha256};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

fn seed() -> [u8; 32] {
    let mut s = [0u8; 32];
    getrandom::fill(&mut s).expect("random");
    s
}

/// Keys and one lease: `lease` is the signature (hex) on the first line,
/// then the body: the executable's SHA-256, the executable, its argv, one a
/// line.
fn setup(dir: &Path, cmd: &[String]) {
    fs::create_dir_all(dir).expect("dir");
    let approver = SigningKey::from_bytes(&seed());
    fs::write(
        dir.join("approver.pub"),
        approver.verifying_key().as_bytes(),
    )
    .expect("pub");
    fs::write(dir.join("runner.key"), seed()).expect("runner key");
    let exe = fs::canonicalize(&cmd[0]).expect("executable");
    let digest = Sha256::digest(fs::read(&exe).expect("read executable"));
    let mut body = format!("{}\n{}\n", hex(&digest), exe.display());
    for a in &cmd[1..] {
        body.push_str(a);
        body.push('\n');
    }
    let sig = approver.sign(body.as_bytes());
    fs::write(
        dir.join("lease"),
        format!("{}\n{body}", hex(&sig.to_bytes())),
    )
    .expect("lease");
}

/// The groups this run needs: (directory, file to write `0` into, or the
/// v2 directory itself).
struct Groups {
    dirs: Vec<PathBuf>,
    v1_tasks: Vec<File>,
    v2_dir: Option<File>,
}

impl Drop for Groups {
    fn drop(&mut self) {
        for d in &self.dirs {
            let _ = fs::remove_dir(d);
        }
    }
}

/// One v2 group with `pids.max` and `memory.max` where the v2 hierarchy
/// has both controllers, else a v1 group in each of `pids` and `memory`.
/// The usual mount places only (`/sys/fs/cgroup`, and the hybrid layout's
/// `/sys/fs/cgroup/{pids,memory}`); the own path from `/proc/self/cgroup`.
fn make_groups(name: &str, pids: u64, memory: u64) -> Groups {
    let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let own_of = |pred: &dyn Fn(&str) -> bool| {
        own.lines().find_map(|l| {
            let mut it = l.splitn(3, ':');
            let (_, ctrls, path) = (it.next()?, it.next()?, it.next()?);
            pred(ctrls).then(|| path.trim_start_matches('/').to_string())
        })
    };
    let mut g = Groups {
        dirs: vec![],
        v1_tasks: vec![],
        v2_dir: None,
    };
    let v2_root = Path::new("/sys/fs/cgroup");
    if let Some(own2) = own_of(&|c| c.is_empty()) {
        let base = v2_root.join(&own2);
        let ctrls = fs::read_to_string(base.join("cgroup.subtree_control")).unwrap_or_default();
        let has = |c: &str| ctrls.split_whitespace().any(|x| x == c);
        if has("pids") && has("memory") {
            let d = base.join(name);
            fs::create_dir(&d).expect("v2 group");
            fs::write(d.join("pids.max"), pids.to_string()).expect("pids.max");
            fs::write(d.join("memory.max"), memory.to_string()).expect("memory.max");
            g.v2_dir = Some(
                OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
                    .open(&d)
                    .expect("v2 dir"),
            );
            g.dirs.push(d);
            return g;
        }
    }
    for (ctrl, file, value) in [
        ("pids", "pids.max", pids),
        ("memory", "memory.limit_in_bytes", memory),
    ] {
        let Some(own1) = own_of(&|c| c.split(',').any(|x| x == ctrl)) else {
            continue;
        };
        let d = v2_root.join(ctrl).join(own1).join(name);
        if fs::create_dir(&d).is_err() {
            continue;
        }
        fs::write(d.join(file), value.to_string()).expect("limit");
        g.v1_tasks.push(
            OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(d.join("tasks"))
                .expect("tasks"),
        );
        g.dirs.push(d);
    }
    g
}

fn append_durably(journal: &File, line: &str) {
    (&*journal).write_all(line.as_bytes()).expect("journal");
    nix::unistd::fdatasync(journal.as_raw_fd()).expect("fdatasync");
}

fn run(dir: &Path) -> i32 {
    // 2. The lease and its signature.
    let lease = fs::read_to_string(dir.join("lease")).expect("lease");
    let (sig_hex, body) = lease.split_once('\n').expect("lease shape");
    let trust: [u8; 32] = fs::read(dir.join("approver.pub"))
        .expect("approver.pub")
        .try_into()
        .expect("32 bytes");
    let sig = Signature::from_slice(&unhex(sig_hex)).expect("signature");
    VerifyingKey::from_bytes(&trust)
        .expect("key")
        .verify(body.as_bytes(), &sig)
        .expect("the lease's signature does not verify");
    let mut lines = body.lines();
    let want = lines.next().expect("digest");
    let exe_path = lines.next().expect("executable");
    let argv: Vec<CString> = std::iter::once(exe_path)
        .chain(lines)
        .map(|a| CString::new(a).expect("argv"))
        .collect();
    let runner: [u8; 32] = fs::read(dir.join("runner.key"))
        .expect("runner.key")
        .try_into()
        .expect("32 bytes");

    // 3. Hash while copying into a sealed memfd.
    let mut exe = File::open(exe_path).expect("executable");
    let memfd = sys::memfd_for_exec(c"floor").expect("memfd");
    let mut copy = File::from(memfd);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = exe.read(&mut buf).expect("read executable");
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        copy.write_all(&buf[..n]).expect("copy");
    }
    let memfd = OwnedFd::from(copy);
    sys::seal_for_good(&memfd).expect("seal");
    let digest = hex(&hasher.finalize());
    assert_eq!(digest, want, "executable drift");

    // 4. The cgroups the lease needs.
    let name = format!("governed-floor-{}", std::process::id());
    let groups = make_groups(&name, 1024, 2 << 30);

    // 5. The write-ahead record.
    let journal = OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("journal"))
        .expect("journal");
    let attempt = hex(&seed()[..8]);
    append_durably(
        &journal,
        &format!("{{\"event\":\"executing\",\"attempt\":\"{attempt}\",\"sha256\":\"{digest}\"}}\n"),
    );

    // 6. Clone and exec the sealed copy.
    let devnull = File::open("/dev/null").expect("/dev/null");
    let cwd = File::open(".").expect("cwd");
    let (out_r, out_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let (err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let envp = [CString::new("PATH=/usr/bin:/bin").expect("env")];
    let tasks: Vec<i32> = groups.v1_tasks.iter().map(|f| f.as_raw_fd()).collect();
    let spawned = sys::spawn(&sys::SpawnSpec {
        exe_fd: memfd.as_raw_fd(),
        exe_is_script: false,
        cwd_fd: cwd.as_raw_fd(),
        stdin_fd: devnull.as_raw_fd(),
        stdout_fd: out_w.as_raw_fd(),
        stderr_fd: err_w.as_raw_fd(),
        argv: &argv,
        envp: &envp,
        rlimits: &[],
        creds: None,
        landlock_ruleset_fd: None,
        landlock_guard_fd: None,
        landlock_guard_access: 0,
        landlock_scope_fd: None,
        cgroup_v1_tasks_fds: &tasks,
        cgroup_v2_dir_fd: groups.v2_dir.as_ref().map(|f| f.as_raw_fd()),
        cgroup_v2_procs_fd: None,
        seccomp: None,
        syscall_policy: None,
        new_pid_namespace: false,
        mounts: None,
        root_caps_keep: None,
    })
    .expect("spawn");
    drop((out_w, err_w));
    let sys::Spawned::Running { pid, .. } = spawned else {
        panic!("the child did not start");
    };

    // Drain both pipes in this thread, hashing; then wait.
    let mut streams = [
        (File::from(out_r), Sha256::new(), 0u64, false),
        (File::from(err_r), Sha256::new(), 0u64, false),
    ];
    while streams.iter().any(|s| !s.3) {
        let mut fds: Vec<nix::poll::PollFd> = streams
            .iter()
            .filter(|s| !s.3)
            .map(|s| nix::poll::PollFd::new(s.0.as_fd(), nix::poll::PollFlags::POLLIN))
            .collect();
        nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE).expect("poll");
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        let mut it = ready.into_iter();
        for s in streams.iter_mut().filter(|s| !s.3) {
            if it.next() == Some(true) {
                let n = s.0.read(&mut buf).expect("read output");
                if n == 0 {
                    s.3 = true;
                } else {
                    s.1.update(&buf[..n]);
                    s.2 += n as u64;
                }
            }
        }
    }
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).expect("wait");
    let code = match status {
        nix::sys::wait::WaitStatus::Exited(_, c) => c,
        _ => -1,
    };
    // 7. Gone: the groups are empty, or rmdir fails.
    drop(groups);

    // 8. The result record.
    append_durably(
        &journal,
        &format!("{{\"event\":\"result\",\"attempt\":\"{attempt}\",\"exit_code\":{code}}}\n"),
    );

    // 9. A signed receipt.
    let [(_, so, sn, _), (_, se, en, _)] = streams;
    let payload = format!(
        "{{\"attempt\":\"{attempt}\",\"executable_sha256\":\"{digest}\",\"exit_code\":{code},\"stdout\":{{\"bytes\":{sn},\"sha256\":\"{}\"}},\"stderr\":{{\"bytes\":{en},\"sha256\":\"{}\"}}}}",
        hex(&so.finalize()),
        hex(&se.finalize())
    );
    let sig = SigningKey::from_bytes(&runner).sign(payload.as_bytes());
    let receipt = format!(
        "{{\"payload\":{payload},\"signature\":\"{}\"}}\n",
        hex(&sig.to_bytes())
    );
    std::io::stdout()
        .lock()
        .write_all(receipt.as_bytes())
        .expect("receipt");
    code
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--setup") => {
            let dir = PathBuf::from(&args[1]);
            assert_eq!(args.get(2).map(String::as_str), Some("--"), "usage");
            setup(&dir, &args[3..]);
        }
        // `cargo bench` passes `--bench`: nothing to do without a DIR.
        Some("--bench") | None => {}
        Some(dir) => std::process::exit(run(Path::new(dir))),
    }
}
