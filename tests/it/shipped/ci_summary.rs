//! The CI examples show the views: the GitHub Actions example appends the
//! verdict and the receipt as markdown to `$GITHUB_STEP_SUMMARY`, the GitLab
//! example prints the text view. The shell of those steps is taken from the
//! shipped YAML files and run here as the runners would run it.

use std::path::Path;
use std::process::Command;

use crate::support::*;

fn indent(l: &str) -> usize {
    l.len() - l.trim_start().len()
}

/// The `run: |` block of the GitHub Actions step named `name`, dedented.
fn github_step_script(yml: &str, name: &str) -> String {
    let lines: Vec<&str> = yml.lines().collect();
    let step = lines
        .iter()
        .position(|l| l.trim() == format!("- name: {name}"))
        .unwrap_or_else(|| panic!("no step {name:?} in ci/github-actions.yml"));
    let run = step
        + lines[step..]
            .iter()
            .position(|l| l.trim() == "run: |")
            .expect("run: | in the step");
    let base = indent(lines[run]);
    let body: Vec<&str> = lines[run + 1..]
        .iter()
        .take_while(|l| l.trim().is_empty() || indent(l) > base)
        .copied()
        .collect();
    let cut = body.iter().map(|l| indent(l)).min().unwrap_or(0);
    body.iter()
        .map(|l| l.get(cut..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The commands of a GitLab job's `after_script:` list.
fn gitlab_after_script(yml: &str) -> Vec<String> {
    let lines: Vec<&str> = yml.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim() == "after_script:")
        .expect("after_script: in ci/gitlab-ci.yml");
    let base = indent(lines[at]);
    lines[at + 1..]
        .iter()
        .take_while(|l| l.trim().is_empty() || indent(l) > base)
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(String::from)
        .collect()
}

/// A job directory as the CI examples expect it: ci/goal.json and a
/// receipt.json from a real run; `governed-exec` on PATH is the binary
/// under test.
fn job(e: &Env) -> (std::path::PathBuf, String) {
    let dir = e.path("job");
    std::fs::create_dir_all(dir.join("ci")).unwrap();
    std::fs::create_dir_all(e.path("bin")).unwrap();
    std::os::unix::fs::symlink(BIN, e.path("bin/governed-exec")).unwrap();
    std::fs::copy(&e.goal, dir.join("ci/goal.json")).unwrap();
    // As the YAML says the lease was approved: with an isolation option,
    // which keeps the runner key out of the child's reach.
    e.approve(
        &["--fs-write-scope"],
        &["sh", "-c", "echo all tests passed"],
    );
    let r = e.run(&[], &["sh", "-c", "echo all tests passed"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::fs::write(dir.join("receipt.json"), &r.stdout).unwrap();
    // The runner key's public half, committed as the YAML's trust chain
    // says: verify trusts ci/runner.pub.
    std::fs::copy(e.runner_pub(), dir.join("ci/runner.pub")).unwrap();
    let path = format!(
        "{}:{}",
        e.path("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (dir, path)
}

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

#[test]
fn github_actions_example_writes_both_views_to_the_job_summary() {
    require_tool!(
        "github_actions_example_writes_both_views_to_the_job_summary",
        "bash"
    );
    let e = Env::new();
    let (dir, path) = job(&e);
    let script = github_step_script(
        &repo_file("ci/github-actions.yml"),
        "Job summary (governed-exec views)",
    );
    let summary = e.path("step-summary.md");
    let o = Command::new("bash")
        .args(["-e", "-c", &script])
        .current_dir(&dir)
        .env("PATH", path)
        .env("GITHUB_STEP_SUMMARY", &summary)
        .env("GOVERNED_EXEC_STATE_DIR", &e.state)
        // The lease of this job used no --ledger: its ledger is the state dir.
        .env("GOVERNED_EXEC_LEDGER", &e.state)
        .output()
        .unwrap();
    assert!(o.status.success(), "{script}\n{o:?}");
    let md = std::fs::read_to_string(&summary).unwrap();
    assert_eq!(md.lines().next(), Some("VERIFIED_DONE"), "{md}");
    assert!(md.contains("| exit\\_code equals 0 | met |"), "{md}");
    assert!(md.contains("### governed-exec receipt: exited"), "{md}");
    assert!(md.contains("all tests passed"), "{md}");
}

#[test]
fn gitlab_example_prints_the_text_view() {
    let e = Env::new();
    let (dir, path) = job(&e);
    let cmds = gitlab_after_script(&repo_file("ci/gitlab-ci.yml"));
    assert!(!cmds.is_empty());
    let mut out = String::new();
    for c in &cmds {
        let o = Command::new("sh")
            .args(["-c", c])
            .current_dir(&dir)
            .env("PATH", &path)
            .env("GOVERNED_EXEC_STATE_DIR", &e.state)
            .output()
            .unwrap();
        assert!(o.status.success(), "{c}: {o:?}");
        out.push_str(&String::from_utf8_lossy(&o.stdout));
    }
    assert!(out.contains("outcome      exited"), "{out}");
    assert!(out.contains("| all tests passed"), "{out}");
}

/// The GitHub job's steps as shipped — the runner key from the secret, the
/// run, the verify — taken verbatim from ci/github-actions.yml and run by a
/// non-root runner uid (65534) in a fresh clone, against a directory
/// ledger the approver gave to that uid. The step script is a stand-in
/// with the shipped interface (the real one runs this repository's
/// `cargo test`, which a test cannot nest).
#[test]
fn the_github_job_steps_run_as_shipped_by_a_non_root_runner() {
    if !is_root() {
        skip!("needs root to act as the approver and run the job as uid 65534");
        return;
    }
    let e = Env::new();
    let origin = e.path("origin");
    std::fs::create_dir_all(origin.join("ci")).unwrap();
    if !git(&origin, &["init", "-q"]) {
        skip!("git is not installed");
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(repo.join("ci/goal.json"), origin.join("ci/goal.json")).unwrap();
    std::fs::copy(repo.join(".gitignore"), origin.join(".gitignore")).unwrap();
    let step = origin.join("ci/governed-step.sh");
    std::fs::write(&step, "#!/bin/sh\nset -eu\necho \"governed step for $1\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&step, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The approver: a directory ledger given to the runner's uid, the
    // documented approve, the stable CI runner key.
    let ledger = e.path("ledger");
    let o = output(
        cmd()
            .current_dir(&origin)
            .args([
                "approve",
                "--goal",
                "ci/goal.json",
                "--workspace",
                ".",
                "--manifest",
                "ci/manifest.json",
                "--key",
            ])
            .arg(&e.key)
            .args(["--portable", "--ledger"])
            .arg(&ledger)
            .args([
                "--ledger-owner",
                "65534:65534",
                "--profile",
                "long",
                "--fs-write-scope",
                "--ttl",
                "30d",
                "--uses",
                "500",
                "--",
                "./ci/governed-step.sh",
                "github",
            ]),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::copy(&e.trust, origin.join("ci/approver.pub")).unwrap();
    assert!(
        output(cmd().arg("keygen").arg("--out").arg(e.path("ci-runner")))
            .status
            .success()
    );
    std::fs::copy(e.path("ci-runner.pub"), origin.join("ci/runner.pub")).unwrap();
    let secret = std::fs::read_to_string(e.path("ci-runner.key")).unwrap();
    assert!(git(&origin, &["add", "-A"]) && git(&origin, &["commit", "-qm", "approve"]));
    assert!(git(
        e.dir.path(),
        &["clone", "-q", origin.to_str().unwrap(), "job"]
    ));
    let job = e.path("job");
    let runner_temp = e.path("runner-temp");
    std::fs::create_dir(&runner_temp).unwrap();
    let bin = nobody_copy_of_binary(&e);
    let bindir = e.path("bin");
    std::fs::create_dir(&bindir).unwrap();
    std::os::unix::fs::symlink(&bin, bindir.join("governed-exec")).unwrap();
    let yml = repo_file("ci/github-actions.yml");
    let script = [
        "The CI runner key (stable, from the secret; outside the workspace)",
        "Run the approved test step (headless, bounded)",
        "Verify the receipt against the goal and the ledger",
    ]
    .iter()
    .map(|name| github_step_script(&yml, name))
    .collect::<Vec<_>>()
    .join("\n");
    let o = output_settled({
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "--",
        ])
        .args(["bash", "-e", "-c", &script])
        .current_dir(&job)
        .env(
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", bindir.display()),
        )
        .env("HOME", &runner_temp)
        .env("RUNNER_TEMP", &runner_temp)
        .env("GITHUB_WORKSPACE", &job)
        .env("GOVERNED_EXEC_RUNNER_KEY", secret.trim_end())
        .env("GOVERNED_EXEC_STATE_DIR", runner_temp.join("governed-exec"))
        .env("GOVERNED_EXEC_LEDGER", &ledger)
        .stdin(std::process::Stdio::null());
        c
    });
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    if err.contains("isolation_unavailable") {
        skip!("the lease's write scope cannot be enforced for uid 65534 here: {err}");
        return;
    }
    assert!(
        o.status.success(),
        "{script}\nstdout:\n{out}\nstderr:\n{err}"
    );
    assert!(err.contains("governed step for github"), "{err}");
    assert_eq!(out.lines().next(), Some("VERIFIED_DONE"), "{out}\n{err}");
    // The receipt was signed by the stable key, the one ci/runner.pub holds.
    let stmt = decode_envelope(&std::fs::read(job.join("receipt.json")).unwrap());
    assert_eq!(stmt["predicate"]["signing"]["key_out_of_child_reach"], true);
}
