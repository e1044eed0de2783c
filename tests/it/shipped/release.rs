//! The release workflow as shipped (.github/workflows/release.yml,
//! ci/release-*.{toml,json,sh}): its governed build step replayed — approve
//! the shipped approvals file once in one checkout, commit, `git clone`
//! (the job's fresh checkout), run the shipped wrapper under the shipped
//! release Goal, verify. The real build takes minutes, so the approved
//! argv names a stand-in build script with build-static.sh's interface
//! (its last stdout line is the binary's path); everything else is the
//! shipped files.

use std::path::Path;

use crate::support::*;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn shipped(rel: &str) -> String {
    std::fs::read_to_string(Path::new(REPO).join(rel)).unwrap()
}

const BUILD_ARGV: &str = "\"./ci/release-build.sh\", \"github\", \"scripts/build-static.sh\"";

#[test]
fn the_release_workflow_runs_the_approved_build_under_the_release_goal() {
    let workflow = shipped(".github/workflows/release.yml");
    for needle in [
        "tags: [\"v*\"]",
        "governed-exec approve --file ci/release-approvals.toml",
        "--manifest ci/release-manifest.json --check",
        "governed-exec run --goal ci/release-goal.json --manifest ci/release-manifest.json",
        "--trust ci/approver.pub --key \"$RUNNER_TEMP/runner.key\"",
        "-- ./ci/release-build.sh github scripts/build-static.sh",
        "governed-exec verify --goal ci/release-goal.json",
        "--trust ci/runner.pub --ledger \"$GOVERNED_EXEC_LEDGER\"",
        "sha256sum -c governed-exec.sha256",
        "dist/governed-exec dist/governed-exec.sha256 dist/governed-exec.receipt.json",
    ] {
        assert!(workflow.contains(needle), "release.yml lacks {needle:?}");
    }
    // The approver's key never reaches CI: the job only spends a use.
    assert!(
        !workflow.contains("approver.key") && !workflow.contains("APPROVER_KEY"),
        "release.yml approves in CI"
    );
    // Every repository file the workflow runs or reads is there (a step
    // naming a script that was renamed fails only on a tag push).
    for word in workflow.split(|c: char| c.is_whitespace() || c == '"' || c == ')') {
        let word = word
            .trim_start_matches("./")
            .trim_end_matches([',', '.', ';', ':', '`']);
        if (word.starts_with("scripts/") || word.starts_with("ci/")) && !word.contains('$') {
            let generated = [
                "ci/release-manifest.json",
                "ci/approver.pub",
                "ci/runner.pub",
                "ci/ledger-ca.pem",
            ];
            if generated.contains(&word) {
                continue; // made and committed by the approver (ci/github-actions.yml)
            }
            assert!(
                Path::new(REPO).join(word).exists(),
                "release.yml names {word}, which the repository lacks"
            );
        }
    }
    let approvals = shipped("ci/release-approvals.toml");
    for needle in [
        "goal = \"release-goal.json\"",
        "portable = true",
        "ledger = \"postgres://",
        "fs_write_scope = true",
        &format!("run = [{BUILD_ARGV}]"),
    ] {
        assert!(
            approvals.contains(needle),
            "ci/release-approvals.toml lacks {needle:?}"
        );
    }
    let goal: serde_json::Value = serde_json::from_str(&shipped("ci/release-goal.json")).unwrap();
    assert_eq!(goal["schema"], "governed-exec/goal/v1");
    assert!(
        goal["criteria"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["kind"] == "file" && c["path"] == "dist/governed-exec"),
        "the release Goal names the built binary"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(Path::new(REPO).join("ci/release-build.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert!(mode & 0o111 != 0, "ci/release-build.sh is executable");
}

#[test]
fn the_governed_release_build_verifies_and_its_receipt_carries_the_binarys_digest() {
    let e = Env::new();
    let origin = e.path("origin");
    std::fs::create_dir_all(origin.join("ci")).unwrap();
    std::fs::create_dir_all(origin.join("scripts")).unwrap();
    if !git(&origin, &["init", "-q"]) {
        skip!("git is not installed: the release-build replay needs it");
        return;
    }
    for f in ["ci/release-build.sh", "ci/release-goal.json", ".gitignore"] {
        std::fs::copy(Path::new(REPO).join(f), origin.join(f)).unwrap();
    }
    // The stand-in for scripts/build-static.sh: builds into target/ and
    // prints the binary's path last, after cargo-like noise on stdout.
    let stand_in = origin.join("scripts/stand-in-build.sh");
    std::fs::write(
        &stand_in,
        "#!/bin/sh\nset -eu\nmkdir -p target/release\necho 'Compiling governed-exec'\n\
         printf '\\177ELF a static binary\\n' > target/release/governed-exec\n\
         echo \"$PWD/target/release/governed-exec\"\n",
    )
    .unwrap();
    let ledger = match test_cluster_ledger("ge_release") {
        Some(ledger) => ledger,
        None => {
            skip!("no PostgreSQL test cluster: replaying the release build with a shared-directory ledger instead");
            e.path("shared-ledger").display().to_string()
        }
    };
    let approvals = shipped("ci/release-approvals.toml")
        .replace(
            "postgres://ledger.example.internal:5432/governed_exec",
            &ledger,
        )
        .replace(
            BUILD_ARGV,
            "\"./ci/release-build.sh\", \"none\", \"scripts/stand-in-build.sh\"",
        );
    std::fs::write(origin.join("ci/release-approvals.toml"), approvals).unwrap();
    let o = output(
        cmd()
            .current_dir(&origin)
            .args([
                "approve",
                "--file",
                "ci/release-approvals.toml",
                "--manifest",
                "ci/release-manifest.json",
                "--key",
            ])
            .arg(&e.key),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::copy(&e.trust, origin.join("ci/approver.pub")).unwrap();
    let o = output(cmd().arg("keygen").arg("--out").arg(e.path("ci-runner")));
    assert!(o.status.success());
    std::fs::copy(e.path("ci-runner.pub"), origin.join("ci/runner.pub")).unwrap();
    assert!(git(&origin, &["add", "-A"]) && git(&origin, &["commit", "-qm", "release lease"]));

    // The tag's fresh checkout, a fresh state dir, the key outside it.
    assert!(git(
        e.dir.path(),
        &["clone", "-q", origin.to_str().unwrap(), "job"]
    ));
    let job = e.path("job");
    let runner_temp = e.path("runner-temp");
    std::fs::create_dir_all(&runner_temp).unwrap();
    let receipt = runner_temp.join("governed-exec.receipt.json");
    let pg = |c: &mut std::process::Command| {
        if let Some(ca) = std::env::var_os("GOVERNED_EXEC_TEST_PG_CA")
            .filter(|_| ledger.starts_with("postgres://"))
        {
            c.env("PGSSLMODE", "verify-full").env("PGSSLROOTCERT", ca);
        }
    };
    let o = output(cmd().current_dir(&job).args([
        "approve",
        "--file",
        "ci/release-approvals.toml",
        "--manifest",
        "ci/release-manifest.json",
        "--check",
    ]));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let mut run = cmd();
    run.current_dir(&job)
        .args([
            "run",
            "--goal",
            "ci/release-goal.json",
            "--manifest",
            "ci/release-manifest.json",
            "--trust",
            "ci/approver.pub",
            "--key",
        ])
        .arg(e.path("ci-runner.key"))
        .arg("--workspace")
        .arg(&job)
        .arg("--state-dir")
        .arg(runner_temp.join("ge-state"))
        .arg("--receipt")
        .arg(&receipt)
        .args([
            "--stream",
            "--",
            "./ci/release-build.sh",
            "none",
            "scripts/stand-in-build.sh",
        ]);
    pg(&mut run);
    let o = output(run);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut verify = cmd();
    verify
        .current_dir(&job)
        .args(["verify", "--goal", "ci/release-goal.json", "--receipt"])
        .arg(&receipt)
        .args(["--trust", "ci/runner.pub", "--ledger", &ledger]);
    pg(&mut verify);
    let o = output(verify);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().next(),
        Some("VERIFIED_DONE"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );

    // The published assets agree: the binary, its .sha256 (sha256sum's
    // format) and the digest the signed receipt carries.
    let bin = std::fs::read(job.join("dist/governed-exec")).unwrap();
    assert_eq!(bin, b"\x7fELF a static binary\n");
    let digest = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&bin))
    };
    assert_eq!(
        std::fs::read_to_string(job.join("dist/governed-exec.sha256")).unwrap(),
        format!("{digest}  governed-exec\n")
    );
    let stmt = decode_envelope(&std::fs::read(&receipt).unwrap());
    let products = stmt["predicate"]["products"].as_array().unwrap();
    assert!(
        products
            .iter()
            .any(|p| p["path"] == "dist/governed-exec" && p["sha256"] == digest.as_str()),
        "{products:?}"
    );
    assert_eq!(stmt["predicate"]["binding"], "portable");
    assert_eq!(
        stmt["predicate"]["request"]["argv"],
        serde_json::json!(["none", "scripts/stand-in-build.sh"])
    );
    // dist/ is ignored: the release build leaves the checkout clean.
    let status = std::process::Command::new("git")
        .current_dir(&job)
        .args(["status", "--porcelain"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&status.stdout), "");
}
