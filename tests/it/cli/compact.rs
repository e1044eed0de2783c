//! `compact`: a long-lived manifest keeps only what can still run; what
//! leaves it is archived as stored.

use serde_json::Value;

use crate::support::*;

fn compact(e: &Env) -> std::process::Output {
    output(
        cmd()
            .arg("compact")
            .arg("--manifest")
            .arg(&e.manifest)
            .arg("--state-dir")
            .arg(&e.state),
    )
}

fn lease_ids(e: &Env) -> Vec<String> {
    let m: Value = serde_json::from_slice(&std::fs::read(&e.manifest).unwrap()).unwrap();
    m["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let body: Value = match &l["body"] {
                Value::String(s) => serde_json::from_str(s).unwrap(),
                b => b.clone(),
            };
            body["lease_id"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn compact_moves_out_exactly_the_leases_that_can_never_run_again() {
    let e = Env::new();
    let used = e.approve(&["--uses", "1"], &["/bin/echo", "used"]);
    assert_eq!(e.run(&[], &["/bin/echo", "used"]).code, 0);
    let left = e.approve(&["--uses", "2"], &["/bin/echo", "left"]);
    assert_eq!(e.run(&[], &["/bin/echo", "left"]).code, 0);
    let expired = e.approve(&["--ttl", "1s"], &["/bin/echo", "expired"]);
    let old = e.approve(&[], &["/bin/echo", "replaced"]);
    let new = e.approve(&[], &["/bin/echo", "replaced"]);
    let revoked = e.approve(&[], &["/bin/echo", "revoked"]);
    let o = output(
        cmd()
            .args(["revoke", "--lease", &revoked, "--by", "ops"])
            .arg("--manifest")
            .arg(&e.manifest)
            .arg("--state-dir")
            .arg(&e.state),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::thread::sleep(std::time::Duration::from_millis(1100));

    let o = compact(&e);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut kept = lease_ids(&e);
    kept.sort();
    let mut want = vec![left.clone(), new.clone()];
    want.sort();
    assert_eq!(kept, want);

    let archive = e.path("manifest.json.spent.jsonl");
    let lines: Vec<Value> = std::fs::read_to_string(&archive)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let why_of = |id: &str| {
        lines
            .iter()
            .find(|l| l["lease"].to_string().contains(id))
            .map(|l| l["why"].as_str().unwrap().to_string())
    };
    assert_eq!(why_of(&used).as_deref(), Some("used_up"));
    assert_eq!(why_of(&expired).as_deref(), Some("expired"));
    assert_eq!(why_of(&old).as_deref(), Some("superseded"));
    assert_eq!(why_of(&revoked).as_deref(), Some("revoked"));
    assert_eq!(lines.len(), 4);

    // What stays runs as before.
    assert_eq!(e.run(&[], &["/bin/echo", "left"]).code, 0);
    assert_eq!(e.run(&[], &["/bin/echo", "replaced"]).code, 0);
    // What left is the lease as signed: put back in a manifest, it is
    // refused for being used up, not for a broken signature.
    #[derive(serde::Deserialize)]
    struct Line {
        why: String,
        lease: Box<serde_json::value::RawValue>,
    }
    let raw = std::fs::read_to_string(&archive).unwrap();
    let archived = raw
        .lines()
        .map(|l| serde_json::from_str::<Line>(l).unwrap())
        .find(|l| l.why == "used_up")
        .unwrap()
        .lease;
    let back = format!(
        r#"{{"schema": "governed-exec/manifest/v1", "leases": [{}]}}"#,
        archived.get()
    );
    std::fs::write(&e.manifest, back).unwrap();
    e.run(&[], &["/bin/echo", "used"])
        .assert_refused("lease_exhausted");
    // Compacting again moves it again, and appends.
    let o = compact(&e);
    assert!(o.status.success());
    assert_eq!(
        std::fs::read_to_string(&archive).unwrap().lines().count(),
        5
    );
    assert!(lease_ids(&e).is_empty());
}
