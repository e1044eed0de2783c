//! CONTRACT §11: `run --nonce X` binds a receipt to one run; `verify
//! --nonce X` refuses a genuine receipt of another run (a stale one left at
//! the receipt path) or one that carries no nonce.

use crate::support::*;

fn run_with_nonce(e: &Env, nonce: Option<&str>, name: &str) -> (Run, std::path::PathBuf) {
    let flags: Vec<&str> = nonce.map_or(vec![], |n| vec!["--nonce", n]);
    let r = e.run(&flags, &["true"]);
    let p = e.path(name);
    std::fs::write(&p, &r.stdout).expect("save receipt");
    (r, p)
}

fn verify_nonce(e: &Env, receipt: &std::path::Path, nonce: &str) -> (i32, String) {
    let mut c = e.verify_cmd(receipt, &e.runner_pub());
    c.args(["--nonce", nonce]);
    let o = output(c);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).to_string(),
    )
}

#[test]
fn a_receipt_verifies_only_for_the_nonce_of_its_own_run() {
    let e = Env::new();
    e.approve(&["--uses", "2"], &["true"]);
    let (r1, old) = run_with_nonce(&e, Some("ci-run-1001"), "old.json");
    assert_eq!(r1.code, 0, "{}", r1.stderr);
    assert_eq!(r1.predicate()["nonce"], "ci-run-1001");
    let (r2, new) = run_with_nonce(&e, Some("ci-run-1002"), "new.json");
    assert_eq!(r2.code, 0, "{}", r2.stderr);

    let (code, out) = verify_nonce(&e, &new, "ci-run-1002");
    assert_eq!(
        (code, out.lines().next()),
        (0, Some("VERIFIED_DONE")),
        "{out}"
    );
    // The stale, genuine receipt of the earlier run cannot stand in.
    let (code, out) = verify_nonce(&e, &old, "ci-run-1002");
    assert_eq!(code, 1, "{out}");
    assert_eq!(out.lines().next(), Some("NOT_VERIFIED"));
    assert!(
        out.contains("nonce_mismatch") && out.contains("ci-run-1001"),
        "{out}"
    );
    // Without --nonce, verify does not ask.
    assert_eq!(e.verify(&old).0, 0);
}

#[test]
fn a_receipt_without_a_nonce_fails_a_verify_that_asks_for_one() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let (r, p) = run_with_nonce(&e, None, "r.json");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.predicate().get("nonce").is_none_or(|n| n.is_null()));
    let (code, out) = verify_nonce(&e, &p, "ci-run-7");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("carries no nonce"), "{out}");
}

#[test]
fn a_refusal_carries_the_nonce_and_a_bad_nonce_is_refused_before_anything() {
    let e = Env::new();
    // No lease for this command: the refusal still names this run's nonce.
    e.approve(&[], &["false"]);
    let r = e.run(&["--nonce", "job-42"], &["true"]);
    r.assert_refused("no_matching_lease");
    assert_eq!(r.predicate()["nonce"], "job-42");

    e.approve(&[], &["true"]);
    let long = "x".repeat(257);
    for bad in ["", "a\nb", long.as_str()] {
        let r = e.run(&["--nonce", bad], &["true"]);
        r.assert_refused("invalid_input");
        assert!(r.stderr.contains("--nonce"), "{}", r.stderr);
    }
    // The lease's one use is still there.
    assert_eq!(e.journal_executing_count(), 0);
    let r = e.run(&["--nonce", "ok"], &["true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}
