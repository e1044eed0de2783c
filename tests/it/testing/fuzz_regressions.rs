//! Replays every saved fuzz input (tests/fuzz-regressions/<target>/*) and the
//! seed corpus through the fuzzed entry points: none may panic, and no
//! unsigned bytes may verify.

use std::path::Path;

fn inputs(target: &str) -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in [
        root.join("tests/fuzz-regressions").join(target),
        root.join("fuzz/seeds").join(target),
    ] {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for f in rd.flatten() {
                out.push(std::fs::read(f.path()).unwrap());
            }
        }
    }
    out
}

#[test]
fn saved_fuzz_inputs_do_not_panic() {
    use governed_model::*;
    for d in inputs("parse_goal") {
        let _ = parse_json::<Goal>("t", &d);
    }
    for d in inputs("parse_request") {
        let _ = parse_json::<Request>("t", &d);
    }
    for d in inputs("parse_manifest") {
        let _ = parse_json::<Manifest>("t", &d);
    }
    for d in inputs("parse_receipt") {
        if let Ok(env) = parse_json::<Envelope>("t", &d) {
            let _ = governed_evidence::receipt::decode_statement(&env);
        }
        let _ = parse_json::<Statement>("t", &d);
    }
    for d in inputs("parse_journal") {
        let _ = governed_ledger::journal::parse_journal_bytes(Path::new("t.jsonl"), &d);
    }
    for d in inputs("checkpoint") {
        governed_testkit::fuzzing::checkpoint(&d);
    }
    for d in inputs("pem_key") {
        governed_testkit::fuzzing::pem_key(&d);
    }
    for d in inputs("lease") {
        governed_testkit::fuzzing::lease(&d);
    }
    for d in inputs("output_projection") {
        governed_testkit::fuzzing::output_projection(&d);
    }
    let seeds = inputs("verify_envelope");
    assert!(!seeds.is_empty(), "the seed corpus is missing");
    for d in seeds {
        governed_testkit::fuzzing::verify_envelope_judged(&d);
    }
}
