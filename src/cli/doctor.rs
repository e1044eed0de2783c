//! `doctor`: what `run` could enforce on this machine, as this uid, and by
//! which mechanism — or, for each thing it could not, the exact reason.
//!
//! Every answer comes from the function `run` itself calls, executed for
//! real: namespaces are entered inside a throw-away child
//! ([`sys::probe_in_child`]), the seccomp filter is installed in one and
//! tried, a pids cgroup is created and removed, `clone3` is probed with an
//! argument the kernel rejects before creating anything. An approver runs
//! it on the target before approving.

use nix::sys::resource::{getrlimit, Resource};
use serde::Serialize;

use governed_model::limits::tier;
use governed_model::{MaxProcesses, Profile};
use governed_runner::process::accounting;
use governed_runner::process::cgroup::{self, RunCgroups};
use governed_runner::process::isolation;
use governed_runner::process::process_limit;
use governed_sys as sys;
use governed_sys::CAP_SYS_RESOURCE;

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub available: bool,
    /// The mechanism `run` uses for it here, when available.
    pub mechanism: Option<String>,
    /// Plain words: how, or exactly why not.
    pub detail: String,
}

#[derive(Debug, Serialize)]
pub struct ProfileLimit {
    pub profile: String,
    pub max_processes: MaxProcesses,
    /// The mechanism `run` would choose for a child of this uid, or `None`
    /// when such a lease would be refused `isolation_unavailable`.
    pub mechanism: Option<String>,
    pub detail: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub uid: u32,
    pub euid: u32,
    pub kernel: String,
    pub checks: Vec<Check>,
    /// `max_processes` of each profile's default, for a child running as
    /// this uid (no `--as-user`).
    pub process_limit_by_profile: Vec<ProfileLimit>,
}

/// What doctor found for one thing a lease may ask for: the mechanism
/// `run` uses for it here and how, or why it cannot be had. A row of the
/// report, not an error: an unavailable finding is printed, never raised.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Finding {
    Available { mechanism: String, detail: String },
    Unavailable { why: String },
}

impl Finding {
    fn yes(mechanism: String, detail: String) -> Finding {
        Finding::Available { mechanism, detail }
    }

    fn no(why: String) -> Finding {
        Finding::Unavailable { why }
    }

    /// What a probe or a check answered: its mechanism and how, or its
    /// error's words.
    fn of<E: std::fmt::Display>(r: Result<(String, String), E>) -> Finding {
        match r {
            Ok((mechanism, detail)) => Finding::yes(mechanism, detail),
            Err(e) => Finding::no(e.to_string()),
        }
    }
}

fn check(name: &'static str, f: Finding) -> Check {
    match f {
        Finding::Available { mechanism, detail } => Check {
            name,
            available: true,
            mechanism: Some(mechanism),
            detail,
        },
        Finding::Unavailable { why } => Check {
            name,
            available: false,
            mechanism: None,
            detail: why,
        },
    }
}

/// Whether the child could set `resource` to the largest tier's value: a
/// hard limit can only be lowered without `CAP_SYS_RESOURCE`.
fn rlimit_check(resource: Resource, mechanism: &str, largest: u64, can_raise: bool) -> Finding {
    let hard = getrlimit(resource).map(|(_, hard)| hard).unwrap_or(0);
    let shown = |v: u64| {
        if v == libc::RLIM_INFINITY {
            "unlimited".to_string()
        } else {
            v.to_string()
        }
    };
    if can_raise || hard >= largest {
        Finding::yes(
            mechanism.to_string(),
            format!(
                "setrlimit in the child before exec (soft = hard = the lease's value); this process's hard limit: {}{}",
                shown(hard),
                if can_raise { ", and it may raise it (CAP_SYS_RESOURCE)" } else { "" }
            ),
        )
    } else {
        Finding::no(format!(
            "this process's hard limit is {} (below the long tier's {largest}) and it cannot raise it (no CAP_SYS_RESOURCE): a lease above {} ends exec_failed at setrlimit; approve a value at most that",
            shown(hard),
            shown(hard)
        ))
    }
}

fn errno_text(errno: i32) -> String {
    let name = match errno {
        libc::ENOSYS => "ENOSYS",
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::EINVAL => "EINVAL",
        _ => "",
    };
    format!("{name} ({})", std::io::Error::from_raw_os_error(errno))
}

pub fn report() -> Report {
    let uid = nix::unistd::getuid().as_raw();
    let euid = nix::unistd::geteuid().as_raw();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let mut checks = vec![spawn_check()];
    let (limits, process_limit_by_profile) = limit_checks(euid);
    checks.extend(limits);
    checks.extend(isolation_checks(euid));
    checks.extend(key_checks(euid));
    Report {
        uid,
        euid,
        kernel,
        checks,
        process_limit_by_profile,
    }
}

/// How `run` makes the child: clone3, or clone with CLONE_PIDFD.
fn spawn_check() -> Check {
    check(
        "spawn",
        match sys::clone3_probe() {
            Ok(()) => Finding::yes(
                "clone3".into(),
                "clone3 with CLONE_PIDFD (and CLONE_INTO_CGROUP for a v2 group)".into(),
            ),
            Err(errno) => Finding::yes(
                "clone_pidfd".into(),
                format!(
                    "clone3 answers {}, as under Docker's default seccomp profile: run uses clone with CLONE_PIDFD (pidfd from birth; the child joins its v2 cgroup itself before exec), or fork + pidfd_open on a kernel without CLONE_PIDFD",
                    errno_text(errno)
                ),
            ),
        },
    )
}

/// The limits of a lease on this machine: the same cgroups `run` makes
/// (made and removed again), the rlimits, the runner's own deadline and
/// output cap, and the process limit each profile would get.
fn limit_checks(euid: u32) -> (Vec<Check>, Vec<ProfileLimit>) {
    let mut checks = Vec::new();
    // The same groups `run` makes, made and removed again.
    let probe_id = governed_runner::run::new_id("doctor");
    let largest = tier(Profile::Long).max_processes.limit();
    let cgroups = RunCgroups::create(
        &probe_id,
        largest,
        Some(tier(Profile::Long).memory_bytes),
        false,
    );
    checks.push(check(
        "pids_cgroup",
        match cgroups.process_limit() {
            Some(kind) => Finding::yes(
                kind.into(),
                "a pids cgroup is made for each run, with the lease's max_processes".into(),
            ),
            None => Finding::no(if cgroups.notes().is_empty() {
                "no pids cgroup could be made".into()
            } else {
                cgroups.notes().join("; ")
            }),
        },
    ));
    checks.push(check(
        "rlimit_nproc",
        if euid != 0 {
            Finding::yes(
                "rlimit_nproc".into(),
                format!("binds a child running as uid {euid} (it counts every process of that uid)"),
            )
        } else {
            Finding::no("the child runs as root (governed-exec's uid), which RLIMIT_NPROC does not bind; it binds a child approved with --as-user to a non-root uid".into())
        },
    ));
    checks.extend(memory_checks(&cgroups, euid));
    checks.extend(rlimit_checks(euid));
    let process_limit_by_profile = [Profile::Short, Profile::Standard, Profile::Long]
        .into_iter()
        .map(|p| {
            let max = tier(p).max_processes;
            match process_limit::choose(max, euid, &cgroups) {
                Ok(plan) => ProfileLimit {
                    profile: p.to_string(),
                    max_processes: max,
                    mechanism: Some(plan.report.mechanism),
                    detail: plan.report.detail,
                },
                Err(e) => ProfileLimit {
                    profile: p.to_string(),
                    max_processes: max,
                    mechanism: None,
                    detail: format!("refused isolation_unavailable: {e}"),
                },
            }
        })
        .collect();
    checks.push(check(
        "cgroup_kill",
        if cgroups.has_kill() {
            Finding::yes(
                "cgroup_v2".into(),
                "a v2 group per run: cleanup also kills through cgroup.kill and requires `populated 0`".into(),
            )
        } else {
            Finding::no("no cgroup v2 group can be made: cleanup relies on the subreaper tree walk (and a v1 pids group's members where there is one)".into())
        },
    ));
    drop(cgroups);
    (checks, process_limit_by_profile)
}

/// CONTRACT §9: the memory limit (a memory cgroup where `run` can make
/// one, else RLIMIT_AS) and how the run's resources are read.
fn memory_checks(cgroups: &RunCgroups, euid: u32) -> Vec<Check> {
    let mut checks = Vec::new();
    // The other limits of a lease: rlimits the child sets on itself just
    // before exec (soft = hard = the lease's value), and the runner's own
    // deadline and output cap.
    let long = tier(Profile::Long);
    let can_raise = euid == 0 && sys::has_effective_capability(CAP_SYS_RESOURCE);
    // CONTRACT §9: a memory cgroup where `run` can make one, else RLIMIT_AS.
    checks.push(match cgroups.memory_limit() {
        Some(kind) => check(
            "memory",
            Finding::yes(
                kind.into(),
                "a memory cgroup per run limits the resident memory of the whole run (no swap); an OOM kill of the main process is `memory_limit_reaped` (exit 121)".into(),
            ),
        ),
        None => {
            let why = if cgroups.memory_notes().is_empty() {
                "no memory cgroup could be made".to_string()
            } else {
                cgroups.memory_notes().join("; ")
            };
            let mut c = check(
                "memory",
                rlimit_check(Resource::RLIMIT_AS, "rlimit_as", long.memory_bytes, can_raise),
            );
            c.detail = format!(
                "{why}: falls back to RLIMIT_AS (virtual address space of each process, not resident memory); {}",
                c.detail
            );
            c
        }
    });
    checks.push(check(
        "resource_accounting",
        match accounting::read_counters(&cgroups.counter_dirs()) {
            Some(c) => Finding::yes(
                c.mechanism.into(),
                format!(
                    "read once from the run's cgroups at its end: CPU of every process, {}, {}, {}, {}",
                    c.peak_memory.as_ref().map_or_else(|e| format!("no peak memory ({e})"), |_| "peak memory".into()),
                    c.io.as_ref().map_or_else(|e| format!("no IO bytes ({e})"), |_| "IO bytes".into()),
                    c.peak_processes.as_ref().map_or_else(|e| format!("no peak processes ({e})"), |_| "peak processes".into()),
                    c.oom_kills.as_ref().map_or_else(|e| format!("no OOM kills ({e})"), |_| "OOM kills".into()),
                ),
            ),
            None => Finding::yes(
                "rusage".into(),
                "no cgroup can be made for a run here: the receipt has the children's getrusage (CPU and IO of the processes waited for, the largest process's peak RSS) and says why the other figures are null".into(),
            ),
        },
    ));
    checks
}

/// The rlimits of a lease, the deadline, the output cap and the enclosing
/// `pids.max`.
fn rlimit_checks(euid: u32) -> Vec<Check> {
    let mut checks = Vec::new();
    let long = tier(Profile::Long);
    let can_raise = euid == 0 && sys::has_effective_capability(CAP_SYS_RESOURCE);
    for (name, resource, rlimit, largest) in [
        (
            "cpu_time",
            Resource::RLIMIT_CPU,
            "rlimit_cpu",
            long.cpu_time_s,
        ),
        (
            "open_files",
            Resource::RLIMIT_NOFILE,
            "rlimit_nofile",
            long.max_open_files,
        ),
        (
            "file_size",
            Resource::RLIMIT_FSIZE,
            "rlimit_fsize",
            long.max_file_size_bytes,
        ),
    ] {
        checks.push(check(
            name,
            rlimit_check(resource, rlimit, largest, can_raise),
        ));
    }
    checks.push(check(
        "wall_time",
        Finding::yes(
            "deadline".into(),
            "the runner's own deadline: TERM to the whole tree, then KILL after the kill grace; `timed_out_reaped` only once every process was observed gone".into(),
        ),
    ));
    checks.push(check(
        "output_cap",
        Finding::yes(
            "drain_count".into(),
            "the runner drains and counts both streams: past the lease's output cap the tree is killed (`output_limit_reaped` once observed gone)".into(),
        ),
    ));
    checks.push(check(
        "enclosing_pids_max",
        Finding::of(cgroup::enclosing_pids_max().map(|(n, file)| {
            (
                "enclosing_pids_max".into(),
                format!(
                    "{} = {n}: used for a lease whose max_processes is at least {n}",
                    file.display()
                ),
            )
        })),
    ));
    checks
}

/// The isolation options a lease may ask for, probed here.
fn isolation_checks(euid: u32) -> Vec<Check> {
    let mut checks = Vec::new();
    checks.push(check(
        "landlock",
        match sys::landlock_abi_version() {
            Some(abi) => Finding::yes(
                format!("landlock_abi_{abi}"),
                format!("--fs-write/--fs-read enforced with Landlock ABI {abi}"),
            ),
            None => Finding::no(format!(
                "the kernel offers no Landlock: landlock_create_ruleset answers {}",
                errno_text(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
            )),
        },
    ));
    checks.push(check(
        "user_namespace",
        Finding::of(sys::probe_in_child(|| isolation::enter_user_namespace().map(|()| String::new()))
            .map(|_| {
                (
                    "user_namespace".into(),
                    "an unprivileged user namespace can be made (used for --no-network, --allow-net and --pid-namespace without CAP_SYS_ADMIN)".into(),
                )
            })),
    ));
    checks.push(check(
        "no_network",
        Finding::of(sys::probe_in_child(|| {
            isolation::enter_namespaces(true, &[], false)
                .map(|ns| ns.net.map(|m| m.as_str()).unwrap_or("").to_string())
        })
        .map(|m| {
            let detail = match m.as_str() {
                "seccomp_socket_families" => format!(
                    "no namespace can be made here; a seccomp filter allows only {} sockets (no TCP/UDP at all, loopback included)",
                    sys::SECCOMP_ALLOWED_FAMILIES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(" and ")
                ),
                "user_and_network_namespace" => "a network namespace inside an unprivileged user namespace, loopback only".into(),
                _ => "a network namespace with only loopback".into(),
            };
            (m, detail)
        })),
    ));
    checks.push(check(
        "allow_net",
        Finding::of(sys::probe_in_child(|| {
            // What `run` does for --allow-net: the proxy's thread in this
            // namespace, the child's namespace with the listener in it.
            isolation::enter_namespaces(false, &["doctor.invalid:443".to_string()], false)
                .map(|ns| ns.net.map(|m| m.as_str()).unwrap_or("").to_string())
        })
        .map(|m| {
            (
                m,
                format!("the child gets a network namespace with only loopback and governed-exec's HTTP proxy on {}, which dials only the lease's --allow-net entries from the runner's network", governed_runner::process::network::PROXY_ADDR),
            )
        })),
    ));
    checks.push(check(
        "pid_namespace",
        Finding::of(
            sys::probe_in_child(|| {
                isolation::enter_namespaces(false, &[], true)
                    .map(|ns| ns.pid.unwrap_or("").to_string())
            })
            .map(|m| {
                (
                    m,
                    "the program runs in its own PID namespace under governed-exec's init".into(),
                )
            }),
        ),
    ));
    checks.push(check(
        "seccomp",
        match sys::SocketFilter::no_network() {
            None => Finding::no("no seccomp socket filter is written for this architecture".into()),
            Some(f) => Finding::of(f.check().map(|()| {
                (
                    "seccomp_filter".into(),
                    "a seccomp filter can be installed (the --no-network fallback)".into(),
                )
            })),
        },
    ));
    checks.push(check("syscall_policy", syscall_policy_finding()));
    checks.push(check(
        "as_user",
        if euid == 0 {
            Finding::yes("setresuid".into(), "governed-exec runs as root: --as-user UID[:GID] switches the child's uid/gid and drops every capability".into())
        } else {
            Finding::no(format!("governed-exec runs as uid {euid}; switching the child's uid needs root"))
        },
    ));
    checks
}

/// The syscall policy every isolated lease gets unless its approver waived
/// it (CONTRACT §7, v1.3): what `run` checks before a use is spent, tried
/// here the same way (installed in a throw-away child and probed).
fn syscall_policy_finding() -> Finding {
    let isolated = governed_model::IsolationRequest {
        pid_namespace: true,
        ..Default::default()
    };
    Finding::of(isolation::syscall_policy(&isolated).map(|f| {
        let sha = f.as_ref().map(isolation::syscall_policy_sha256).unwrap_or_default();
        (
            "seccomp_bpf".into(),
            format!(
                "{} (sha256 {sha} on {}) is installed in every isolated child right before exec: EPERM for what Docker's default profile blocks, ENOSYS for clone3 (--syscalls unconfined waives it)",
                sys::SYSCALL_POLICY_NAME,
                std::env::consts::ARCH
            ),
        )
    }))
}

/// The runner key and the child's reach.
fn key_checks(euid: u32) -> Vec<Check> {
    let mut checks = Vec::new();
    // The runner key (rootchild's rules, run.rs `signing_report`): which
    // leases keep it out of the child's reach on this machine.
    let admin = sys::has_effective_capability(21);
    let landlock = sys::landlock_abi_version().is_some();
    checks.push(check(
        "runner_key_out_of_reach",
        if euid == 0 && admin {
            Finding::yes("as_user_or_mount_namespace".into(), "with --as-user to a non-root uid (a root-owned 0600 key is unreadable to it), or, for a uid-0 child, with any isolation option (its own mount namespace covers the key and it keeps only harmless capabilities); a lease without either leaves the key in reach and `verify` refuses the receipt unless --allow-key-in-reach".into())
        } else if euid == 0 {
            Finding::yes("as_user".into(), "only with --as-user to a non-root uid: governed-exec lacks CAP_SYS_ADMIN (a container's default), so a uid-0 child gets no mount namespace to cover the key and can read it".into())
        } else if landlock {
            Finding::yes("landlock".into(), format!("the child runs as uid {euid}, the key's owner; with any isolation option a Landlock ruleset denies it the key and the state dir; without one the key is in reach"))
        } else {
            Finding::no(format!("the child runs as uid {euid}, the same uid that owns the runner key, and the kernel offers no Landlock to deny it the key"))
        },
    ));
    checks.extend(reach_checks(euid, admin, sys::landlock_abi_version()));
    checks
}

/// The child's reach on this machine (CONTRACT §7, v1.2), as `run` computes
/// it (`gate::reach`, `process::isolation`): each daemon socket and ledger
/// credential file present, and the runner's signals, for a child of this
/// uid without isolation, under isolation, and `--as-user` another uid.
/// `available` says whether some lease can keep it out of reach here.
fn reach_checks(euid: u32, admin: bool, landlock_abi: Option<i64>) -> Vec<Check> {
    use governed_runner::gate::reach::{self, ChildIds};
    let same_uid = ChildIds::runners_own();
    let mut out = Vec::new();
    for (sock, daemon) in reach::daemon_sockets(euid, euid, &[]) {
        let Ok(meta) = std::fs::metadata(&sock) else {
            continue;
        };
        let modes = reach::mode_text(&meta);
        // The rule `run` applies, for a child of this uid; a root runner
        // with CAP_SYS_ADMIN covers the socket under any isolation option.
        let rule = reach::socket_reach(&same_uid, euid == 0 && admin, &meta);
        let plain = if same_uid.may(&meta, 2) {
            "reachable by a child of this uid without isolation"
        } else {
            "out of reach of a child of this uid by its modes"
        };
        let r = match rule {
            reach::SocketReach::Covered => Finding::yes("mount_cover".to_string(), format!("{daemon} at {} ({modes}): {plain}; any isolation option covers it in the child's mount namespace", sock.display())),
            _ if euid == 0 => Finding::yes("file_modes".to_string(), format!("{daemon} at {} ({modes}): {plain}; governed-exec lacks CAP_SYS_ADMIN to cover it, so only --as-user to a uid outside its owner and group keeps it out", sock.display())),
            reach::SocketReach::Reachable => Finding::no(format!("{daemon} at {} ({modes}): this uid (or one of its groups) may connect, and no lease can take that from its child (Landlock does not mediate connect(2)); receipts will say the key was in reach and the cleanup evadable: run governed-exec as a uid outside the socket's group", sock.display())),
            reach::SocketReach::Denied => Finding::yes(
                "file_modes".to_string(),
                format!("{daemon} at {} ({modes}): {plain}", sock.display()),
            ),
        };
        out.push(check("reach_daemon_socket", r));
    }
    for f in governed_ledger::pg::credential_files() {
        let r = if euid == 0 && admin {
            Finding::yes(
                "mount_cover".to_string(),
                format!(
                    "{}: any isolation option covers it in the child's mount namespace",
                    f.display()
                ),
            )
        } else if landlock_abi.is_some() {
            Finding::yes(
                "landlock".to_string(),
                format!(
                    "{}: any isolation option denies it to the child (the Landlock guard)",
                    f.display()
                ),
            )
        } else {
            Finding::no(format!(
                "{}: a child of this uid can read it; no Landlock here to deny it",
                f.display()
            ))
        };
        out.push(check("reach_ledger_credentials", r));
    }
    let signals = match landlock_abi {
        Some(abi) if abi >= 6 => Finding::yes("landlock_scope".to_string(), format!("with any isolation option Landlock (ABI {abi}) scopes the child's signals to its own processes; --pid-namespace or --as-user another uid also keep the runner out of its reach; without isolation a child of this uid may SIGSTOP the runner")),
        _ => Finding::yes("pid_namespace_or_uid".to_string(), "only --pid-namespace or --as-user another uid keep the runner's signals out of the child's reach (no Landlock signal scope, ABI 6, here)".to_string()),
    };
    out.push(check("reach_runner_signals", signals));
    out
}

pub fn render_text(r: &Report) -> String {
    let mut out = format!(
        "governed-exec doctor: uid {} (euid {}), kernel {}\n",
        r.uid, r.euid, r.kernel
    );
    for c in &r.checks {
        let head = match &c.mechanism {
            Some(m) => format!("yes  {m}"),
            None => "no".into(),
        };
        out.push_str(&format!("  {:<24} {head}: {}\n", c.name, c.detail));
    }
    out.push_str("  process limit of each profile, for a child of this uid:\n");
    for p in &r.process_limit_by_profile {
        out.push_str(&format!(
            "    {:<9} max_processes {:<6} {}: {}\n",
            p.profile,
            p.max_processes.to_string(),
            p.mechanism.as_deref().unwrap_or("REFUSED"),
            p.detail
        ));
    }
    out.push_str("    any       max_processes unlimited waived: the approver's explicit waiver, shown in the summary and the receipt\n");
    out
}

/// `doctor --ledger L`: whether this uid can use the ledger a lease would
/// name: for a directory, that it was made by `approve` (its `journal/`),
/// who owns it with what mode, and that this uid can enter, create and
/// lock files in it and read every journal; for PostgreSQL, that a
/// connection with the libpq environment succeeds and the schema is one
/// this release reads. Nothing is written.
pub fn ledger_check(l: &str) -> Check {
    check("ledger", Finding::of(ledger_usable(l)))
}

/// Why this uid cannot use a ledger (`doctor --ledger`): each names the
/// path and, for a permission error, who owns what and the fix.
#[derive(Debug, thiserror::Error)]
enum LedgerUnusable {
    #[error(transparent)]
    Spec(#[from] governed_ledger::LedgerSpecError),
    #[error("{}: {source}{hint}", .path.display())]
    Stat {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
        hint: String,
    },
    #[error("{} is not a directory", .0.display())]
    NotADirectory(std::path::PathBuf),
    #[error("uid {euid} cannot use {}{hint}", .path.display())]
    Denied {
        euid: u32,
        path: std::path::PathBuf,
        hint: String,
    },
    #[error(transparent)]
    Ledger(#[from] governed_ledger::LedgerError),
    /// A journal of the ledger that does not read: its label and why.
    #[error("{label}: {why}")]
    Chain {
        label: String,
        why: governed_ledger::BrokenChain,
    },
}

fn ledger_usable(l: &str) -> Result<(String, String), LedgerUnusable> {
    use governed_ledger::LedgerSpec;
    use nix::unistd::{faccessat, AccessFlags};
    use std::os::unix::fs::MetadataExt;
    let spec = LedgerSpec::parse(l)?;
    let euid = nix::unistd::geteuid().as_raw();
    let led = spec.open();
    match &spec {
        LedgerSpec::Path(dir) => {
            let mut owners = Vec::new();
            for d in [dir.clone(), dir.join("journal")] {
                let m = std::fs::metadata(&d).map_err(|source| LedgerUnusable::Stat {
                    hint: governed_sys::safe_io::permission_hint(&d, &source),
                    path: d.clone(),
                    source,
                })?;
                if !m.is_dir() {
                    return Err(LedgerUnusable::NotADirectory(d));
                }
                let need = AccessFlags::X_OK | AccessFlags::W_OK | AccessFlags::R_OK;
                if faccessat(None, &d, need, nix::fcntl::AtFlags::AT_EACCESS).is_err() {
                    let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
                    return Err(LedgerUnusable::Denied {
                        euid,
                        hint: governed_sys::safe_io::permission_hint(&d, &denied),
                        path: d,
                    });
                }
                owners.push(format!(
                    "{} uid {} gid {} mode {:04o}",
                    d.display(),
                    m.uid(),
                    m.gid(),
                    m.mode() & 0o7777
                ));
            }
            let chains = led.chains()?;
            if let Some((p, Err(e))) = chains.iter().find(|(_, r)| r.is_err()) {
                return Err(LedgerUnusable::Chain {
                    label: p.clone(),
                    why: e.clone(),
                });
            }
            Ok((
                "directory".into(),
                format!(
                    "uid {euid} can enter, create and lock files in it and read its {} journal(s): {}",
                    chains.len(),
                    owners.join("; ")
                ),
            ))
        }
        LedgerSpec::Postgres(_) => {
            let chains = led.chains()?;
            Ok((
                "postgres".into(),
                format!(
                    "{}: connected with the libpq environment as uid {euid}'s user, schema read, {} goal chain(s)",
                    led.name(),
                    chains.len()
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finding_is_a_row_available_with_its_mechanism_or_not_with_why() {
        let yes = check(
            "x",
            Finding::of(Ok::<_, std::io::Error>(("m".into(), "how".into()))),
        );
        assert!(yes.available);
        assert_eq!(yes.mechanism.as_deref(), Some("m"));
        assert_eq!(yes.detail, "how");
        let no = check(
            "x",
            Finding::of(Err::<(String, String), _>(
                std::io::Error::from_raw_os_error(libc::EPERM),
            )),
        );
        assert!(!no.available);
        assert_eq!(no.mechanism, None);
        assert_eq!(no.detail, "Operation not permitted (os error 1)");
    }

    /// `doctor --ledger` names the path and what is wrong with it.
    #[test]
    fn a_ledger_that_is_no_directory_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, b"").unwrap();
        let c = ledger_check(file.to_str().unwrap());
        assert!(!c.available);
        assert_eq!(c.detail, format!("{} is not a directory", file.display()));
        let missing = dir.path().join("missing");
        let c = ledger_check(missing.to_str().unwrap());
        assert!(!c.available);
        assert!(
            c.detail.starts_with(&format!(
                "{}: No such file or directory (os error 2)",
                missing.display()
            )),
            "{}",
            c.detail
        );
        let c = ledger_check("");
        assert_eq!(c.detail, "--ledger: empty path");
    }
}
