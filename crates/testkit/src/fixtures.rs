//! Fixtures the unit and integration tests share: file shapes with every
//! field set, and the key that signs them. Model values only, so a crate
//! below this one can use them in its own unit tests.

use ed25519_dalek::SigningKey;
use governed_model::record::Event;
use governed_model::*;

/// The signing key of [`lease_body`]'s lease (a fixed seed).
pub fn lease_key() -> SigningKey {
    SigningKey::from_bytes(&[9u8; 32])
}

/// A directory identity at `path` (device 1, inode 2, a birth time).
pub fn dir(path: &str) -> DirIdentity {
    DirIdentity {
        path: path.into(),
        device: 1,
        inode: 2,
        creation: Some(CreationStamp {
            source: "statx_btime".into(),
            value: 3,
        }),
    }
}

/// A lease body with every field set (`lease-1` of goal `g`, `sh -c …`,
/// machine-bound, 2 uses): what the unit tests compare and sign.
pub fn lease_body() -> LeaseBody {
    LeaseBody {
        schema: LEASE_SCHEMA.into(),
        lease_id: "lease-1".into(),
        goal: GoalRef {
            id: "g".into(),
            revision: 3,
            sha256: "ab".repeat(32),
        },
        workspace: dir("/w"),
        request: Request {
            executable: "sh".into(),
            argv: vec!["-c".into(), "echo ok; rm -rf /".into()],
            cwd: ".".into(),
            profile: Profile::Short,
        },
        executable: ExecutableIdentity {
            requested: "sh".into(),
            canonical_path: "/usr/bin/dash".into(),
            symlink_chain: vec![SymlinkHop {
                path: "/usr/bin/sh".into(),
                target: "dash".into(),
            }],
            device: 1,
            inode: 5,
            size: 100,
            mode: 0o100755,
            mtime_ns: 7,
            ctime_ns: 8,
            sha256: "cd".repeat(32),
            interpreter: None,
        },
        cwd: dir("/w"),
        limits: governed_model::limits::tier(Profile::Short),
        env: EnvPolicy {
            path: "/usr/bin".into(),
            fixed: [("A".to_string(), "1".to_string())].into(),
        },
        isolation: IsolationRequest::default(),
        approver: "alice".into(),
        issued_at: "2026-01-01T00:00:00Z".into(),
        expires_at: "2026-01-01T00:15:00Z".into(),
        max_uses: 2,
        binding: Binding::Machine,
        portable: None,
        ledger: None,
    }
}

/// An `executing` record of `attempt` (lease `lease`, Goal `goal`) for
/// tests of what the journal and the ledger derive from records.
pub fn executing(goal: &str, attempt: &str, lease: &str, max_uses: u64) -> Event {
    Event::Executing {
        attempt_id: attempt.into(),
        lease_id: lease.into(),
        lease_fingerprint: "f".into(),
        goal: GoalRef {
            id: goal.into(),
            revision: 1,
            sha256: "s".into(),
        },
        use_number: 1,
        max_uses,
        runner_pid: 1,
        executable: Box::new(ExecutableIdentity {
            requested: "x".into(),
            canonical_path: "/x".into(),
            symlink_chain: vec![],
            device: 0,
            inode: 0,
            size: 0,
            mode: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            sha256: String::new(),
            interpreter: None,
        }),
        cwd: Box::new(DirIdentity {
            path: "/".into(),
            device: 0,
            inode: 0,
            creation: None,
        }),
    }
}
