//! The CI flow as shipped (docs/GUIDE.md "Use it in a CI step", ci/*.yml), replayed:
//! approve once in one checkout, commit, `git clone` twice (two "runners",
//! each with a fresh state dir), run and verify in each clone against the
//! same ledger (PostgreSQL when the test cluster is there, else a shared
//! directory, said loudly).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn shipped(rel: &str) -> String {
    std::fs::read_to_string(Path::new(REPO).join(rel)).unwrap()
}

#[test]
fn the_shipped_ci_docs_use_a_portable_lease_a_ledger_and_the_leases_profile() {
    let mut guide = shipped("docs/GUIDE.md");
    let start = guide.find("## Use it in a CI step").unwrap();
    guide = guide[start..].to_string();
    let end = guide[3..].find("\n## ").map_or(guide.len(), |e| e + 3);
    guide.truncate(end);
    for (name, text) in [
        ("the guide's CI section", guide),
        ("ci/github-actions.yml", shipped("ci/github-actions.yml")),
        ("ci/gitlab-ci.yml", shipped("ci/gitlab-ci.yml")),
    ] {
        for needle in [
            "approve --file ci/approvals.toml",
            "--check",
            "-- ./ci/governed-step.sh",
            "scripts/build-static.sh",
            "--trust ci/runner.pub",
            "ci/runner.pub",
            "ci/ledger-ca.pem",
            "ci/goal.json",
        ] {
            assert!(text.contains(needle), "{name} lacks {needle:?}");
        }
        // run never names another profile than the lease's.
        for other in ["--profile short", "--profile standard"] {
            assert!(!text.contains(other), "{name} names {other:?}");
        }
        assert!(
            !text.contains("-- cargo test"),
            "{name} still approves cargo directly"
        );
        // The receipt is signed by the stable CI runner key, and checked
        // against the committed ci/runner.pub, never a key made in the job.
        assert!(
            !text.contains("STATE_DIR/runner.pub") && !text.contains("ge-state/runner.pub"),
            "{name} trusts a runner key made fresh in the job"
        );
        assert!(
            text.contains("--key "),
            "{name} does not sign with the stable runner key"
        );
        assert!(
            !text.contains("cargo install"),
            "{name} installs another way"
        );
    }
    // What the step's leases are is the approvals file's.
    let approvals = shipped("ci/approvals.toml");
    for needle in [
        "portable = true",
        "ledger = \"postgres://",
        "profile = \"long\"",
        "fs_write_scope = true",
        "run = [\"./ci/governed-step.sh\", \"github\"]",
        "run = [\"./ci/governed-step.sh\", \"gitlab\"]",
    ] {
        assert!(
            approvals.contains(needle),
            "ci/approvals.toml lacks {needle:?}"
        );
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(Path::new(REPO).join("ci/governed-step.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert!(mode & 0o111 != 0, "ci/governed-step.sh is executable");
    let goal: serde_json::Value = serde_json::from_str(&shipped("ci/goal.json")).unwrap();
    assert_eq!(goal["schema"], "governed-exec/goal/v1");
}

#[test]
fn the_documented_ci_flow_runs_in_fresh_clones_against_one_ledger() {
    let e = Env::new();
    let origin = e.path("origin");
    std::fs::create_dir_all(origin.join("ci")).unwrap();
    if !git(&origin, &["init", "-q"]) {
        skip!("git is not installed: the CI-flow replay needs it");
        return;
    }
    // The shipped goal; a stand-in step with the shipped interface (the
    // real one runs `cargo test`, which a test cannot nest).
    std::fs::copy(
        Path::new(REPO).join("ci/goal.json"),
        origin.join("ci/goal.json"),
    )
    .unwrap();
    let step = origin.join("ci/governed-step.sh");
    std::fs::write(&step, "#!/bin/sh\nset -eu\necho \"governed step for $1\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&step, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(git(&origin, &["add", "-A"]) && git(&origin, &["commit", "-qm", "ci"]));

    let ledger = match test_cluster_ledger("ge_ci") {
        Some(ledger) => ledger,
        None => {
            skip!("no PostgreSQL test cluster: replaying the CI flow with a shared-directory ledger instead");
            e.path("shared-ledger").display().to_string()
        }
    };

    // Once, by a human, in a checkout: exactly the documented approve, of
    // the shipped approvals file (its ledger pointed at this test's).
    let approvals = shipped("ci/approvals.toml").replace(
        "postgres://ledger.example.internal:5432/governed_exec",
        &ledger,
    );
    std::fs::write(origin.join("ci/approvals.toml"), approvals).unwrap();
    // The ledger's CA, committed as the YAML's PGSSLROOTCERT names it: with
    // the TLS test cluster every job connects with PGSSLMODE=verify-full.
    let tls = std::env::var("GOVERNED_EXEC_TEST_PG_CA")
        .ok()
        .filter(|_| ledger.starts_with("postgres://"));
    if let Some(ca) = &tls {
        std::fs::copy(ca, origin.join("ci/ledger-ca.pem")).unwrap();
    } else {
        skip!("the CI-flow replay connects without TLS: the test cluster has no certificate");
    }
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
            .arg(&e.key),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::copy(&e.trust, origin.join("ci/approver.pub")).unwrap();
    // The stable CI runner key: made once by the approver, its private half
    // the CI secret, its public half committed as ci/runner.pub.
    let o = output(cmd().arg("keygen").arg("--out").arg(e.path("ci-runner")));
    assert!(o.status.success());
    std::fs::copy(e.path("ci-runner.pub"), origin.join("ci/runner.pub")).unwrap();
    let secret = std::fs::read(e.path("ci-runner.key")).unwrap();
    // The shipped .gitignore keeps the manifest's lock file out of the commit.
    std::fs::copy(
        Path::new(REPO).join(".gitignore"),
        origin.join(".gitignore"),
    )
    .unwrap();
    assert!(origin.join("ci/manifest.json.lock").exists());
    assert!(git(&origin, &["add", "-A"]) && git(&origin, &["commit", "-qm", "lease"]));
    let tracked = Command::new("git")
        .current_dir(&origin)
        .args(["ls-files"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&tracked.stdout).contains("manifest.json.lock"),
        "the lock file was committed"
    );

    // A GitHub runner is not root: as root, every job step runs as uid
    // 65534 (the binary where that uid can run it, the job's checkout,
    // RUNNER_TEMP and HOME its own).
    let as_runner = is_root();
    let ge = if as_runner {
        use std::os::unix::fs::PermissionsExt;
        let bin_dir = e.path("ge-bin");
        std::fs::create_dir_all(&bin_dir).unwrap();
        std::fs::copy(BIN, bin_dir.join("governed-exec")).unwrap();
        for d in [e.dir.path(), bin_dir.as_path()] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        bin_dir.join("governed-exec")
    } else {
        PathBuf::from(BIN)
    };
    let job_cmd = |dir: &Path, home: &Path| {
        let mut c = if as_runner {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "--",
            ])
            .arg(&ge);
            c
        } else {
            Command::new(&ge)
        };
        c.current_dir(dir)
            .env("HOME", home)
            .stdin(std::process::Stdio::null());
        if tls.is_some() {
            c.env("PGSSLMODE", "verify-full")
                .env("PGSSLROOTCERT", "ci/ledger-ca.pem");
        }
        c
    };
    for job in ["job1", "job2"] {
        assert!(git(
            e.dir.path(),
            &["clone", "-q", origin.to_str().unwrap(), job]
        ));
        let clone = e.path(job);
        let runner_temp = e.path(&format!("{job}-runner-temp"));
        let state = runner_temp.join("ge-state");
        // The job writes the secret to a 0600 file outside the workspace.
        std::fs::create_dir_all(&runner_temp).unwrap();
        let key = runner_temp.join("runner.key");
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&key)
                .unwrap()
                .write_all(&secret)
                .unwrap();
        }
        if as_runner {
            for d in [&clone, &runner_temp] {
                let o = Command::new("chown")
                    .args(["-R", "65534:65534"])
                    .arg(d)
                    .output()
                    .unwrap();
                assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            }
        }
        // The pull-request job: the file agrees with the signed manifest
        // in a fresh clone at another path (portable leases).
        let o = output(job_cmd(&clone, &runner_temp).args([
            "approve",
            "--file",
            "ci/approvals.toml",
            "--manifest",
            "ci/manifest.json",
            "--check",
        ]));
        assert_eq!(
            o.status.code(),
            Some(0),
            "{job}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let o = output(
            job_cmd(&clone, &runner_temp)
                .args([
                    "run",
                    "--goal",
                    "ci/goal.json",
                    "--manifest",
                    "ci/manifest.json",
                    "--trust",
                    "ci/approver.pub",
                    "--key",
                ])
                .arg(&key)
                .arg("--workspace")
                .arg(&clone)
                .arg("--state-dir")
                .arg(&state)
                .args([
                    "--receipt",
                    "receipt.json",
                    "--stream",
                    "--",
                    "./ci/governed-step.sh",
                    "github",
                ]),
        );
        assert!(
            o.status.success(),
            "{job}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(String::from_utf8_lossy(&o.stderr).contains("governed step for github"));
        let o = output(
            job_cmd(&clone, &runner_temp)
                .args([
                    "verify",
                    "--goal",
                    "ci/goal.json",
                    "--receipt",
                    "receipt.json",
                    "--trust",
                    "ci/runner.pub",
                ])
                .args(["--ledger", &ledger]),
        );
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).lines().next(),
            Some("VERIFIED_DONE"),
            "{job}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        let stmt = decode_envelope(&std::fs::read(clone.join("receipt.json")).unwrap());
        assert_eq!(stmt["predicate"]["binding"], "portable");
        if as_runner {
            assert_eq!(stmt["predicate"]["isolation"]["uid"], 65534);
        }
        assert_eq!(stmt["predicate"]["request"]["profile"], "long");
        assert_eq!(
            stmt["predicate"]["workspace_git"]["head_ref"],
            "refs/heads/main"
        );
    }
    // Later, elsewhere: a fresh checkout of the commit the receipt names,
    // the uploaded receipt, the committed ci/runner.pub; no job state.
    let receipt = e.path("uploaded-receipt.json");
    std::fs::copy(e.path("job2/receipt.json"), &receipt).unwrap();
    let head = decode_envelope(&std::fs::read(&receipt).unwrap())["predicate"]["workspace_git"]
        ["head"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(git(
        e.dir.path(),
        &["clone", "-q", origin.to_str().unwrap(), "auditor"]
    ));
    let auditor = e.path("auditor");
    assert!(git(&auditor, &["checkout", "-q", &head]));
    let o = output(
        cmd()
            .current_dir(&auditor)
            .args(["verify", "--goal", "ci/goal.json", "--receipt"])
            .arg(&receipt)
            .args(["--trust", "ci/runner.pub"]),
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().next(),
        Some("VERIFIED_DONE"),
        "a later verifier: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    // Both jobs spent their use in the one ledger.
    let o = output(cmd().args(["journal", "--ledger", &ledger, "list", "--json"]));
    let list: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 2);
}
