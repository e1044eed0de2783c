//! Attacks on what `run`, `verify` and the journal promise, driven through
//! the real binary: each case is an attempt to make governed-exec accept
//! something it must not.

use base64::Engine;
use serde_json::Value;

use crate::support::*;

fn journal_verify(e: &Env) -> (i32, String) {
    let o = output(
        cmd()
            .arg("journal")
            .arg("verify")
            .arg("--state-dir")
            .arg(&e.state),
    );
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).to_string(),
    )
}

fn journal_file(e: &Env) -> std::path::PathBuf {
    std::fs::read_dir(e.state.join("journal"))
        .unwrap()
        .flatten()
        .map(|f| f.path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .expect("journal file")
}

/// A 1-use lease spent, then enough runs of another lease for governed-exec
/// to save its authenticated checkpoint. Cutting the journal short (or
/// deleting it) below that checkpoint must not give the spent use back:
/// `run` refuses with `journal_corrupt`, `journal verify` exits 1.
#[test]
fn a_journal_cut_below_its_checkpoint_gives_back_no_use() {
    for cut in ["emptied", "deleted", "half"] {
        let e = Env::new();
        e.approve(&["--uses", "1"], &["true"]);
        e.approve(&["--uses", "20"], &["echo", "x"]);
        assert_eq!(e.run(&[], &["true"]).code, 0);
        for _ in 0..8 {
            let r = e.run(&[], &["echo", "x"]);
            assert_eq!(r.code, 0, "{}", r.stderr);
        }
        // This open parses 18 records and saves the checkpoint.
        e.run(&[], &["true"]).assert_refused("lease_exhausted");
        assert!(e.state.join("checkpoints").is_dir(), "no checkpoint saved");
        let j = journal_file(&e);
        let bytes = std::fs::read(&j).unwrap();
        match cut {
            "emptied" => std::fs::write(&j, b"").unwrap(),
            "deleted" => std::fs::remove_file(&j).unwrap(),
            _ => {
                // Keep only the first half of the records, whole lines.
                let lines: Vec<&[u8]> = bytes.split_inclusive(|b| *b == b'\n').collect();
                std::fs::write(&j, lines[..lines.len() / 2].concat()).unwrap();
            }
        }
        let r = e.run(&[], &["true"]);
        r.assert_refused("journal_corrupt");
        assert!(
            r.stderr.contains("records were removed or edited"),
            "{}",
            r.stderr
        );
        let (code, out) = journal_verify(&e);
        assert_eq!(code, 1, "{cut}: {out}");
        assert!(out.contains("BROKEN"), "{cut}: {out}");
    }
}

/// DSSE lets `verify` take the URL-safe alphabet (padded or not), and any
/// one signature that verifies: a leading garbage signature does not hide a
/// good one, and a good signature does not cover an edited payload.
#[test]
fn url_safe_base64_and_an_extra_bad_signature_verify_only_the_signed_bytes() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let (r, receipt) = e.run_to_file("r.json", &["true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let env: Value = serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
    let std_b64 = base64::engine::general_purpose::STANDARD;
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let payload = std_b64.decode(env["payload"].as_str().unwrap()).unwrap();
    let sig = std_b64
        .decode(env["signatures"][0]["sig"].as_str().unwrap())
        .unwrap();
    let build = |payload: &[u8]| {
        let mut v = env.clone();
        v["payload"] = url.encode(payload).into();
        v["signatures"] = serde_json::json!([
            { "keyid": "", "sig": url.encode([0u8; 64]) },
            { "keyid": "", "sig": url.encode(&sig) },
        ]);
        let p = e.path("url.json");
        std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
        e.verify(&p)
    };
    let (code, out) = build(&payload);
    assert_eq!(
        (code, out.lines().next()),
        (0, Some("VERIFIED_DONE")),
        "{out}"
    );
    let edited = String::from_utf8(payload)
        .unwrap()
        .replace("\"exit_code\":0", "\"exit_code\":0 ");
    let (code, out) = build(edited.as_bytes());
    assert_eq!(
        (code, out.lines().next()),
        (1, Some("NOT_VERIFIED")),
        "{out}"
    );
    assert!(out.contains("no signature verifies"), "{out}");
}

/// A `file` criterion whose path the child turns into a symlink to a file
/// outside the workspace is neither hashed as a product nor read back.
#[test]
fn a_product_symlinked_out_of_the_workspace_is_not_verified() {
    let e = Env::new();
    std::fs::write(e.path("outside.txt"), "secret\n").unwrap();
    e.set_goal(
        r#"{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
  "criteria": [ { "kind": "exit_code", "equals": 0 },
                { "kind": "file", "path": "out.txt", "contains": "secret" } ] }"#,
    );
    let probe = ["ln", "-s", "../outside.txt", "out.txt"];
    e.approve(&[], &probe);
    let (r, receipt) = e.run_to_file("r.json", &probe);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (code, out) = e.verify(&receipt);
    assert_eq!(
        (code, out.lines().next()),
        (1, Some("NOT_VERIFIED")),
        "{out}"
    );
    assert!(out.contains("out.txt"), "{out}");
}

/// A goal naming a criterion kind this binary does not know is bad input
/// to `verify` (exit 2), with the kind named, never a verdict.
#[test]
fn verify_rejects_an_unknown_criterion_kind_by_name() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let (_, receipt) = e.run_to_file("r.json", &["true"]);
    e.set_goal(
        r#"{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
  "criteria": [ { "kind": "exit_code", "equals": 0 }, { "kind": "http_ok", "url": "x" } ] }"#,
    );
    let o = output(e.verify_cmd(&receipt, &e.runner_pub()));
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    assert!(String::from_utf8_lossy(&o.stderr).contains("http_ok"));
}

/// `exists: false` is not met by a directory or a symlink the child left
/// at the path: neither is a regular file the receipt could hash, yet the
/// path exists.
#[test]
fn must_not_exist_is_not_met_by_a_directory_or_a_symlink() {
    let probes: [(&[&str], &str); 3] = [
        (&["mkdir", "FAILED"], "a directory"),
        (&["ln", "-s", "/etc/passwd", "FAILED"], "a symlink out"),
        (&["ln", "-s", "nowhere", "FAILED"], "a dangling symlink"),
    ];
    for (cmdline, what) in probes {
        let e = Env::new();
        e.set_goal(
            r#"{ "schema": "governed-exec/goal/v1", "id": "t", "revision": 1,
  "criteria": [ { "kind": "exit_code", "equals": 0 },
                { "kind": "file", "path": "FAILED", "exists": false } ] }"#,
        );
        e.approve(&[], cmdline);
        let (r, receipt) = e.run_to_file("r.json", cmdline);
        assert_eq!(r.code, 0, "{what}: {}", r.stderr);
        let (code, out) = e.verify(&receipt);
        assert_eq!(
            (code, out.lines().next()),
            (1, Some("NOT_VERIFIED")),
            "{what}: {out}"
        );
        assert!(out.contains("must not exist"), "{what}: {out}");
        // Once the path is truly gone, the same receipt verifies.
        let p = e.ws.join("FAILED");
        if p.is_dir() && !p.is_symlink() {
            std::fs::remove_dir(&p).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
        let (code, out) = e.verify(&receipt);
        assert_eq!(code, 0, "{what}: {out}");
    }
}
