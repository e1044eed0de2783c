//! Attacks on the identity, binding, lease-matching and ledger promises
//! (contract §2, §4, §6.7), each through the real binary.

use crate::support::*;

/// A ledger-bound lease that a re-approval superseded must not run again
/// from an old copy of the manifest: supersession is a revocation, and the
/// ledger every runner checks has to hold it (§2, §6.7).
#[test]
fn a_superseded_ledger_lease_stays_dead_in_an_old_manifest_copy() {
    let e = Env::new();
    let led = e.path("ledger");
    let led = led.to_str().unwrap();
    let old_id = e.approve(&["--uses", "5", "--ledger", led], &["true"]);
    let old_copy = e.path("old-manifest.json");
    std::fs::copy(&e.manifest, &old_copy).unwrap();
    let new_id = e.approve(&["--uses", "5", "--ledger", led], &["true"]);

    let mut c = cmd();
    c.arg("run")
        .arg("--goal")
        .arg(&e.goal)
        .arg("--manifest")
        .arg(&old_copy)
        .arg("--trust")
        .arg(&e.trust)
        .arg("--state-dir")
        .arg(e.path("other-state"))
        .args(["--lease", &old_id]);
    let r = finish_run(output(c));
    r.assert_refused("lease_revoked");

    let r = e.run(&["--lease", &new_id], &[]);
    assert_eq!(r.class(), "exited", "{}", r.stderr);
}
