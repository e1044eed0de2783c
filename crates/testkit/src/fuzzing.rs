//! Entry points of the fuzz targets (`fuzz/fuzz_targets/*`), here so that
//! `tests/it/testing/fuzz_regressions.rs` and the unit tests below replay saved
//! inputs (`fuzz/seeds/<target>/`, `fuzz/regressions/<target>/`) through
//! exactly the same code on every `cargo test`. Each one panics only when
//! an invariant of the product is broken.
//!
//! A target that only fed raw bytes to a checker would stop at its first
//! check (a signature, a MAC, a hash chain). So the harnesses here do what
//! the holder of the key does — sign the statement, MAC the checkpoint or
//! the manifest index, re-link the journal's hash chain — and let the
//! fuzzer choose everything else: what reaches the decision behind the
//! check is then what a signer (or a child that reached the key) could
//! write. Several inputs have parts: they are split at NUL bytes (see
//! [`parts`]), which the text formats never contain. `docs/FUZZING.md`
//! lists what each target reaches.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use governed_evidence::sign;
use governed_ledger::journal::{self, Checkpoint, Entry, Summary};
use governed_ledger::{Chain, GoalSession, Ledger, LedgerError};
use governed_model::{
    parse_json, CleanupState, Criterion, Lease, LeaseWire, OutcomeClass, ReceiptBody, Statement,
    DSSE_PAYLOAD_TYPE,
};

/// The goal the `verify_envelope` fuzz target judges against.
pub const FUZZ_GOAL: &[u8] =
    br#"{"schema":"governed-exec/goal/v1","id":"g","revision":1,"criteria":[{"kind":"exit_code","equals":0}]}"#;
/// The secret key bytes whose public half the `verify_envelope` target
/// trusts; its seeds are signed with it, so mutations reach the judgement.
pub const FUZZ_KEY: [u8; 32] = [7u8; 32];

/// The fuzz target's invariant: a verdict, never a panic, and
/// VERIFIED_DONE only for an envelope the trusted key signed, whose
/// statement is for this goal and says `exited` with code 0.
pub fn verify_envelope_judged(data: &[u8]) {
    let key = ed25519_dalek::SigningKey::from_bytes(&FUZZ_KEY).verifying_key();
    let v = governed_evidence::verify::judge_bytes(FUZZ_GOAL, data, &key);
    if v.done() {
        let env: governed_model::Envelope =
            serde_json::from_slice(data).unwrap_or_else(|e| panic!("verified a non-envelope: {e}"));
        let payload = governed_evidence::sign::verify_envelope(&env, &key)
            .unwrap_or_else(|e| panic!("verified bytes the key did not sign: {e}"));
        let stmt: governed_model::Statement = serde_json::from_slice(&payload)
            .unwrap_or_else(|e| panic!("verified an unreadable statement: {e}"));
        let o = &stmt.predicate.outcome;
        assert_eq!(
            o.class,
            governed_model::OutcomeClass::Exited,
            "verified a non-exited outcome"
        );
        assert_eq!(o.exit_code, Some(0), "verified a failing exit code");
        assert_eq!(
            stmt.predicate
                .signing
                .as_ref()
                .map(|s| s.key_out_of_child_reach),
            Some(true),
            "verified a receipt whose key was in the child's reach"
        );
        assert_eq!(
            stmt.predicate.goal.as_ref().map(|g| g.sha256.clone()),
            Some(governed_evidence::sign::sha256_hex(FUZZ_GOAL)),
            "verified a receipt of another goal"
        );
    }
}

/// The input split at NUL bytes, at most `n` parts (the last keeps any
/// further NULs).
pub fn parts(data: &[u8], n: usize) -> Vec<&[u8]> {
    data.splitn(n, |b| *b == 0).collect()
}

/// A directory of this process under the temp dir, emptied first when
/// `fresh`: the file targets write what a child or an attacker would have
/// planted there. Canonical, so `starts_with` checks hold.
fn scratch(name: &str, fresh: bool) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("governed-exec-fuzz-{name}-{}", std::process::id()));
    if fresh {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = std::fs::create_dir_all(&dir);
    dir.canonicalize().unwrap_or(dir)
}

/// Journal lines re-linked into a chain: each line that is a JSON object
/// gets `seq` (from `first_seq` on) and `prev` (the previous line's digest,
/// from `prev`); other lines are kept as they are (and break the chain).
/// `subst` replaces placeholders in each line first. Returns the lines and
/// their digests.
pub fn rechain(
    text: &[u8],
    first_seq: u64,
    prev: &str,
    subst: &[(&str, &str)],
) -> (Vec<String>, Vec<String>) {
    let text = String::from_utf8_lossy(text);
    let mut prev = prev.to_string();
    let (mut lines, mut digests) = (Vec::new(), Vec::new());
    for (i, raw) in text.lines().enumerate() {
        let mut raw = raw.to_string();
        for (from, to) in subst {
            raw = raw.replace(from, to);
        }
        let line = match serde_json::from_str::<serde_json::Value>(&raw) {
            Ok(serde_json::Value::Object(mut m)) => {
                m.insert("seq".into(), (first_seq.saturating_add(i as u64)).into());
                m.insert("prev".into(), prev.clone().into());
                serde_json::to_string(&m).unwrap_or(raw)
            }
            _ => raw,
        };
        prev = sign::sha256_hex(line.as_bytes());
        digests.push(prev.clone());
        lines.push(line);
    }
    (lines, digests)
}

fn joined(lines: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(l.as_bytes());
        out.push(b'\n');
    }
    out
}

/// A ledger holding one chain in memory, as `verify --ledger` would read it.
struct MemoryLedger {
    bytes: Vec<u8>,
}

impl Ledger for MemoryLedger {
    fn name(&self) -> String {
        "fuzz-ledger".into()
    }
    fn is_named(&self) -> bool {
        true
    }
    fn open_goal(&self, _goal_id: &str) -> Result<Box<dyn GoalSession>, LedgerError> {
        Err(LedgerError::Unavailable("read only".into()))
    }
    fn chains(&self) -> Result<Vec<Chain>, LedgerError> {
        let chain = journal::parse_chain(Path::new("fuzz.jsonl"), &self.bytes)
            .map_err(|e| governed_ledger::BrokenChain(e.to_string()));
        Ok(vec![("fuzz".into(), chain)])
    }
    fn chain_of(&self, _goal_id: &str) -> Result<Vec<journal::Entry>, LedgerError> {
        // The fuzzed bytes are every Goal's chain.
        journal::parse_chain(Path::new("fuzz.jsonl"), &self.bytes)
            .map_err(|e| LedgerError::Corrupt(e.to_string()))
    }
    fn attempt_is_live(&self, _attempt_id: &str) -> bool {
        false
    }
    fn protected_paths(&self) -> (Option<PathBuf>, Vec<PathBuf>) {
        (None, Vec::new())
    }
}

/// The key the `verify_envelope` harness signs with (the public half is the
/// trusted one): the same as the seeds' ([`FUZZ_KEY`]).
fn runner_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&FUZZ_KEY)
}

/// The workspace `file` criteria are read back from: `out.txt` (`hello`),
/// `empty`, a directory `sub`, `link` → `out.txt`, `escape` → a file
/// outside the workspace. Statements name it as `@WS@`.
fn verify_workspace() -> &'static Path {
    static WS: OnceLock<PathBuf> = OnceLock::new();
    WS.get_or_init(|| {
        let root = scratch("verify", false);
        let ws = root.join("ws");
        let _ = std::fs::create_dir_all(ws.join("sub"));
        let _ = std::fs::write(ws.join("out.txt"), b"hello");
        let _ = std::fs::write(ws.join("empty"), b"");
        let _ = std::fs::write(root.join("outside"), b"hello");
        let _ = std::os::unix::fs::symlink("out.txt", ws.join("link"));
        let _ = std::os::unix::fs::symlink(root.join("outside"), ws.join("escape"));
        ws.canonicalize().unwrap_or(ws)
    })
}

/// `verify` on a statement the runner key signed. The input is
/// `GOAL \0 STATEMENT [\0 JOURNAL]`: the harness signs the statement bytes
/// (with `@GOAL@` replaced by the goal's digest, `@WS@` by a real
/// workspace and `@EXEC@` by the digest of
/// the journal's first line), re-links the journal (`@RECEIPT@` becomes the
/// signed payload's digest) and judges the envelope against the goal, with
/// the journal as the ledger to cross-check when there is one. A goal that
/// does not parse is replaced by [`FUZZ_GOAL`]. An input with no NUL
/// is an envelope judged as is ([`verify_envelope_judged`]:
/// bytes the key did not sign never verify).
///
/// The invariant: VERIFIED_DONE only when the statement, read
/// independently here, meets every rule `verify` promises (CONTRACT §2):
/// this goal's id, revision and digest; the key out of the child's reach;
/// an allowed outcome; each criterion; every product among the subjects;
/// the journal's result naming this very payload.
pub fn verify_envelope(data: &[u8]) {
    let _ = judge_signed(data);
}

/// [`verify_envelope`]'s work; the verdict on a signed statement (`None`
/// for an input with no NUL).
fn judge_signed(data: &[u8]) -> Option<governed_evidence::verify::Verdict> {
    let p = parts(data, 3);
    if p.len() < 2 {
        verify_envelope_judged(data);
        return None;
    }
    let goal_bytes = match governed_model::goal::from_bytes("goal", p[0]) {
        Ok(_) => p[0],
        Err(_) => FUZZ_GOAL,
    };
    let ws = verify_workspace().display().to_string();
    let (journal, exec) = match p.get(2) {
        Some(j) => {
            let (lines, digests) = rechain(j, 0, journal::GENESIS, &[]);
            (
                Some((j, lines)),
                digests.first().cloned().unwrap_or_default(),
            )
        }
        None => (None, String::new()),
    };
    let payload = String::from_utf8_lossy(p[1])
        .replace("@GOAL@", &sign::sha256_hex(goal_bytes))
        .replace("@WS@", &ws)
        .replace("@EXEC@", &exec)
        .into_bytes();
    let key = runner_key();
    let env = sign::sign_envelope(Some(&key), DSSE_PAYLOAD_TYPE, &payload);
    let envelope = serde_json::to_vec(&env).ok()?;
    let receipt_digest = sign::sha256_hex(&payload);
    let ledger = journal.map(|(j, _)| {
        let (lines, _) = rechain(j, 0, journal::GENESIS, &[("@RECEIPT@", &receipt_digest)]);
        MemoryLedger {
            bytes: joined(&lines),
        }
    });
    let v = governed_evidence::verify::judge_bytes_with(
        goal_bytes,
        &envelope,
        &key.verifying_key(),
        ledger.as_ref().map(|l| l as &dyn Ledger),
    );
    if v.done() {
        verified_means_met(goal_bytes, &payload, ledger.as_ref());
    }
    Some(v)
}

/// The rules a VERIFIED_DONE verdict stands for, checked from the bytes.
fn verified_means_met(goal_bytes: &[u8], payload: &[u8], ledger: Option<&MemoryLedger>) {
    let goal = governed_model::goal::from_bytes("goal", goal_bytes)
        .unwrap_or_else(|e| panic!("verified against an unreadable goal: {e}"));
    let stmt: Statement = serde_json::from_slice(payload)
        .unwrap_or_else(|e| panic!("verified an unreadable statement: {e}"));
    let p = &stmt.predicate;
    assert_eq!(
        p.goal.as_ref(),
        Some(&goal.reference()),
        "verified another goal"
    );
    match &p.signing {
        Some(s) => assert!(s.key_out_of_child_reach, "verified with the key in reach"),
        None => assert!(
            p.attempt_id.is_none(),
            "verified a receipt silent on the key's reach"
        ),
    }
    let allowed: Vec<&Vec<OutcomeClass>> = goal
        .goal
        .criteria
        .iter()
        .filter_map(|c| match c {
            Criterion::Outcome { allowed } => Some(allowed),
            _ => None,
        })
        .collect();
    let class = p.outcome.class;
    if allowed.is_empty() {
        assert_eq!(class, OutcomeClass::Exited, "verified a non-exited outcome");
    } else {
        assert!(
            allowed.iter().all(|a| a.contains(&class)),
            "verified an outcome the goal does not allow"
        );
    }
    for prod in &p.products {
        if let Some(h) = &prod.sha256 {
            assert!(
                stmt.subject
                    .iter()
                    .any(|s| s.name == prod.path && s.digest.get("sha256") == Some(h)),
                "verified a product that is not among the subjects"
            );
        }
    }
    let ws = p.workspace.as_deref().map(Path::new);
    for c in &goal.goal.criteria {
        match c {
            Criterion::ExitCode { equals } => {
                assert_eq!(p.outcome.exit_code, Some(*equals), "verified an exit code");
            }
            Criterion::NoLeftoverProcesses {} => assert!(
                p.cleanup.state == CleanupState::Gone
                    && p.cleanup.leftover_processes_killed == 0
                    && !p.cleanup.evadable,
                "verified no_leftover_processes without an observed, unevadable cleanup"
            ),
            Criterion::File { path, exists, .. } => file_criterion_met(p, ws, path, *exists),
            Criterion::Outcome { .. } | Criterion::Resources { .. } | Criterion::Network { .. } => {
            }
        }
    }
    if let Some(l) = ledger {
        let entries = journal::parse_chain(Path::new("fuzz.jsonl"), &l.bytes)
            .unwrap_or_else(|e| panic!("cross-checked against a broken journal: {e}"));
        let attempt = p
            .attempt_id
            .as_deref()
            .unwrap_or_else(|| panic!("cross-checked a receipt of no attempt"));
        let digest = sign::sha256_hex(payload);
        assert!(
            entries.iter().any(|e| matches!(&e.record.event,
                journal::Event::Result { attempt_id, receipt_sha256, .. }
                    if attempt_id == attempt && *receipt_sha256 == digest)),
            "verified a receipt the journal's result does not name"
        );
    }
}

/// A `file` criterion of a verified receipt: inside the workspace, among
/// the products, and the bytes on disk are the receipt's (or, for `must not
/// exist`, nothing is there).
fn file_criterion_met(p: &ReceiptBody, ws: Option<&Path>, path: &str, exists: Option<bool>) {
    assert!(
        !path.starts_with('/') && !path.split('/').any(|c| c == ".."),
        "verified a file criterion outside the workspace: {path:?}"
    );
    let prod = p.products.iter().find(|x| x.path == path);
    assert!(prod.is_some(), "verified a file not among the products");
    let ws = ws.unwrap_or_else(|| panic!("verified a file with no workspace"));
    if exists == Some(false) {
        assert!(
            std::fs::symlink_metadata(ws.join(path)).is_err(),
            "verified `must not exist` for {path:?}, which exists"
        );
    } else {
        let disk = std::fs::read(ws.join(path))
            .unwrap_or_else(|_| panic!("verified {path:?}, unreadable"));
        assert_eq!(
            prod.and_then(|x| x.sha256.clone()),
            Some(sign::sha256_hex(&disk)),
            "verified {path:?} whose bytes on disk are not the receipt's"
        );
    }
}

/// The checkpoint key of the harness (a state dir's `checkpoints/mac.key`).
const MAC_KEY: [u8; 32] = [3u8; 32];

fn seal_checkpoint(cp: &mut Checkpoint, key: &[u8; 32]) {
    cp.mac = hex::encode(journal::hmac_sha256(key, &cp.mac_input()));
}

/// A journal and a checkpoint over it. The input is `JOURNAL [\0 CHECKPOINT]`;
/// the journal's lines are re-linked into a chain (see [`rechain`]).
///
/// - For checkpoints the harness derives (after 0, half and all of the
///   records, MAC'd with the state dir's key): each is trusted, and the
///   journal's tail folded onto it gives exactly the state of the whole
///   chain (`checkpoint_trusted`, `checkpoint_bound`, `fold_after`,
///   `Summary::fold`). The same checkpoint under another key, or with a
///   summary one step off and re-MAC'd, is not trusted.
/// - The fuzzed checkpoint (any numbers, `lines` and `next_seq` at
///   `u64::MAX` included) is MAC'd under the key: trusted only when bound
///   to the record ending at its `len`, and never a panic; the tail after
///   it, folded on, never gives back a spent use.
pub fn checkpoint(data: &[u8]) {
    let p = parts(data, 2);
    let (lines, digests) = rechain(p[0], 0, journal::GENESIS, &[]);
    let bytes = joined(&lines);
    let path = Path::new("fuzz.jsonl");
    if let Ok(entries) = journal::parse_chain(path, &bytes) {
        let whole = Summary::of(&entries);
        let n = entries.len();
        for k in [0, n / 2, n] {
            derived_checkpoint(&bytes, &entries, &digests, k, &whole);
        }
    }
    if let Some(cp_bytes) = p.get(1) {
        fuzzed_checkpoint(cp_bytes, &bytes);
    }
}

fn derived_checkpoint(
    bytes: &[u8],
    entries: &[Entry],
    digests: &[String],
    k: usize,
    whole: &Summary,
) {
    let path = Path::new("fuzz.jsonl");
    let len: usize = bytes
        .split_inclusive(|b| *b == b'\n')
        .take(k)
        .map(<[u8]>::len)
        .sum();
    let mut cp = Checkpoint {
        v: journal::CHECKPOINT_VERSION,
        len: len as u64,
        lines: k,
        summary: Summary::of(&entries[..k]),
        mac: String::new(),
    };
    assert_eq!(
        cp.summary.last_digest,
        digests
            .get(k.wrapping_sub(1))
            .map_or(journal::GENESIS, String::as_str)
    );
    seal_checkpoint(&mut cp, &MAC_KEY);
    assert!(
        journal::checkpoint_trusted(&cp, &MAC_KEY, bytes),
        "an authentic checkpoint of this very chain was not trusted"
    );
    let folded = journal::fold_after(path, &bytes[len..], &cp.summary, k)
        .unwrap_or_else(|e| panic!("the tail after an authentic checkpoint did not parse: {e}"));
    assert_eq!(
        &folded, whole,
        "checkpoint + tail disagrees with the whole chain"
    );
    assert!(
        !journal::checkpoint_trusted(&cp, &[4u8; 32], bytes),
        "a checkpoint was trusted under another key"
    );
    let mut off = cp.clone();
    off.summary.next_seq = off.summary.next_seq.wrapping_add(1);
    seal_checkpoint(&mut off, &MAC_KEY);
    assert!(
        !journal::checkpoint_trusted(&off, &MAC_KEY, bytes),
        "a checkpoint whose next_seq is not its head's was trusted"
    );
    if k > 0 {
        let mut short = cp.clone();
        short.lines = 0;
        seal_checkpoint(&mut short, &MAC_KEY);
        assert!(
            !journal::checkpoint_trusted(&short, &MAC_KEY, bytes),
            "a checkpoint of records claiming none was trusted"
        );
        let mut cut = cp.clone();
        cut.len -= 1;
        seal_checkpoint(&mut cut, &MAC_KEY);
        assert!(
            !journal::checkpoint_trusted(&cut, &MAC_KEY, bytes),
            "a checkpoint ending inside a record was trusted"
        );
    }
}

fn fuzzed_checkpoint(cp_bytes: &[u8], bytes: &[u8]) {
    let Ok(mut cp) = serde_json::from_slice::<Checkpoint>(cp_bytes) else {
        return;
    };
    // As written (a forgery unless the input holds the right MAC), then
    // MAC'd as governed-exec would.
    let _ = journal::checkpoint_trusted(&cp, &MAC_KEY, bytes);
    seal_checkpoint(&mut cp, &MAC_KEY);
    if journal::checkpoint_trusted(&cp, &MAC_KEY, bytes) {
        let len = usize::try_from(cp.len).unwrap_or(usize::MAX);
        assert!(
            len <= bytes.len(),
            "trusted a checkpoint past the file's end"
        );
        assert!(
            len == 0 || bytes[..len].ends_with(b"\n"),
            "trusted a checkpoint that ends inside a record"
        );
        if len > 0 {
            let body = &bytes[..len - 1];
            let head = body
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(body, |i| &body[i + 1..]);
            assert_eq!(
                sign::sha256_hex(head),
                cp.summary.last_digest,
                "trusted a checkpoint not bound to its head record"
            );
        }
        if let Ok(s) = journal::fold_after(
            Path::new("fuzz.jsonl"),
            &bytes[len..],
            &cp.summary,
            cp.lines,
        ) {
            for (lease, n) in &cp.summary.uses {
                assert!(
                    s.uses.get(lease).copied().unwrap_or(0) >= *n,
                    "a journal tail gave back spent uses"
                );
            }
        }
    }
    for tail in [&b""[..], bytes] {
        let _ = journal::fold_after(Path::new("fuzz.jsonl"), tail, &cp.summary, cp.lines);
    }
}

/// A PEM key file as `run --key` / `--trust` read it: a key or an error.
pub fn pem_key(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = governed_evidence::sign::verifying_key_from_pem(text);
        let _ = governed_evidence::sign::signing_key_from_pem(text);
    }
}

/// The approver's key of the `lease` target (its seeds are signed with it).
const APPROVER_KEY: [u8; 32] = [9u8; 32];

/// A stored lease, and the body admission will act on. The input is
/// `LEASE [\0 BODY]`.
///
/// - The lease as given: read, written back, it is the same lease.
/// - Its body re-signed by the approver (`lease::seal`), then stored with
///   the other body text `BODY` (or, without one, the given body with a
///   field changed) under the same fingerprint and signature: that lease
///   verifies only if its body is the signed one — a stored body whose
///   bytes normalise to the signed bytes (whitespace outside strings
///   aside) must mean the very same body, or an approval of one command
///   would admit another.
pub fn lease(data: &[u8]) {
    let p = parts(data, 2);
    let Ok(l) = parse_json::<Lease>("lease", p[0]) else {
        return;
    };
    let key = ed25519_dalek::SigningKey::from_bytes(&APPROVER_KEY);
    let trust = key.verifying_key();
    let _ = governed_runner::gate::lease::signature_valid(&l, &trust);
    for t in [&l.body.issued_at, &l.body.expires_at] {
        let _ = humantime::parse_rfc3339_weak(t);
    }
    // Written back, it reads as the same lease.
    let again: Lease = serde_json::from_slice(&serde_json::to_vec(&l).unwrap_or_default())
        .unwrap_or_else(|e| panic!("a lease did not survive a write: {e}"));
    assert_eq!(again.signed_body, l.signed_body);

    // Signed in the harness over the bytes as stored (a format-1 lease
    // keeps its own bytes; `seal` would re-encode them).
    let fp = governed_runner::gate::lease::fingerprint(&l.signed_body);
    let signed = Lease {
        fingerprint: hex::encode(fp),
        signature: sign::sign_digest(&key, &fp),
        keyid: sign::keyid(&trust),
        ..l.clone()
    };
    assert!(
        governed_runner::gate::lease::signature_valid(&signed, &trust),
        "a lease the approver signed does not verify"
    );
    let pretty: Lease = serde_json::to_vec_pretty(&signed)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| panic!("a signed lease did not survive a pretty write"));
    assert!(
        governed_runner::gate::lease::signature_valid(&pretty, &trust) && pretty.body == l.body,
        "pretty-printing a signed lease changed its body or broke its signature"
    );
    let other = match p.get(1) {
        Some(b) => String::from_utf8_lossy(b).into_owned(),
        None => {
            let mut b = l.body.clone();
            b.max_uses = b.max_uses.wrapping_add(1);
            serde_json::to_string(&b).unwrap_or_default()
        }
    };
    let Ok(raw) = serde_json::value::RawValue::from_string(other) else {
        return;
    };
    let wire = LeaseWire {
        format: Some(signed.format),
        body: raw,
        fingerprint: signed.fingerprint.clone(),
        keyid: signed.keyid.clone(),
        signature: signed.signature.clone(),
    };
    if let Ok(swapped) = Lease::try_from(wire) {
        if governed_runner::gate::lease::signature_valid(&swapped, &trust) {
            assert_eq!(
                swapped.body, l.body,
                "a lease verified with a body other than the one signed"
            );
        }
    }
}

/// Child output bytes: the text projection is terminal-safe, and the
/// capture counts every byte.
pub fn output_projection(data: &[u8]) {
    let text = governed_runner::process::capture::project_text(data);
    assert!(
        !text
            .chars()
            .any(|c| (c.is_control() && c != '\n' && c != '\t')
                || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')),
        "a control character reached the projection"
    );
    let split = data.len() / 2;
    let mut cap = governed_runner::process::capture::StreamCapture::new(16);
    cap.push(&data[..split]);
    cap.push(&data[split..]);
    let r = cap.finish(true);
    assert_eq!(r.bytes, data.len() as u64);
}

/// A workspace's `.git` as a child of an earlier run may have left it, read
/// by `gate::git::head` before spawn. The input is `NAME \0 CONTENT \0 NAME
/// \0 CONTENT …`: each NAME a path under the workspace (`..` and absolute
/// names are dropped), each CONTENT the file's bytes, or `@symlink:TARGET`,
/// `@fifo`, `@dir`. Never a hang or a panic; a HEAD it reports is a 40- or
/// 64-digit hex commit that one of the files planted inside the workspace
/// holds, and a ref name under `refs/` without `..`.
pub fn git_head(data: &[u8]) {
    let root = scratch("git", true);
    let ws = root.join("ws");
    let _ = std::fs::create_dir_all(&ws);
    let _ = std::fs::write(root.join("outside"), "c".repeat(40));
    let fields = parts(data, 64);
    let mut planted = Vec::new();
    let mut links = Vec::new();
    for pair in fields.chunks(2) {
        let name = String::from_utf8_lossy(pair[0]).into_owned();
        let content = pair.get(1).copied().unwrap_or_default();
        let rel = Path::new(&name);
        let plain = !name.is_empty()
            && rel
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !plain {
            continue;
        }
        let at = ws.join(rel);
        if let Some(target) = content.strip_prefix(b"@symlink:") {
            // Last, so that no write below goes through a planted link.
            links.push((at, String::from_utf8_lossy(target).into_owned()));
            continue;
        }
        if let Some(dir) = at.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if content == b"@fifo" {
            let _ = nix::unistd::mkfifo(&at, nix::sys::stat::Mode::S_IRWXU);
        } else if content == b"@dir" {
            let _ = std::fs::create_dir_all(&at);
        } else {
            let _ = std::fs::write(&at, content);
            planted.push(String::from_utf8_lossy(content).into_owned());
        }
    }
    for (at, target) in links {
        // Never inside a directory that is itself a planted link (which
        // could lead anywhere on this machine).
        let through_link = at
            .ancestors()
            .skip(1)
            .take_while(|a| a.starts_with(&ws) && *a != ws)
            .any(|a| std::fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_symlink()));
        if through_link {
            continue;
        }
        if let Some(dir) = at.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::os::unix::fs::symlink(target, &at);
    }
    if let Some(c) = governed_runner::gate::git::head(&ws) {
        assert!(
            (c.head.len() == 40 || c.head.len() == 64)
                && c.head.bytes().all(|b| b.is_ascii_hexdigit()),
            "HEAD {:?} is not a commit id",
            c.head
        );
        assert!(
            planted.iter().any(|t| t.contains(&c.head)),
            "HEAD {} was read from outside the workspace",
            c.head
        );
        if let Some(r) = &c.head_ref {
            assert!(
                r.starts_with("refs/") && !r.split('/').any(|p| p.is_empty() || p == ".."),
                "ref {r:?} is not a plain name under refs/"
            );
        }
    }
}

/// The manifest and its index, as `run` reads them: the input is
/// `MANIFEST \0 INDEX \0 LEASE_ID`. The harness writes the manifest, then
/// the index text with `@STAMP@` replaced by the manifest's stat stamp and
/// the state dir's MAC appended (what a run with that key would write,
/// or a forger holding it), and loads the manifest for `LEASE_ID` (default
/// `lease-1`) through `manifest_index::load_for`: the index MAC, the stamp,
/// the head/tail scanner (`head_is_canonical`, `parse_tail`) and the span
/// reads. Where the whole manifest also parses, what came through the index
/// has exactly the manifest's revocations and supersessions, and only
/// leases the manifest holds: a forged index can leave leases out, never
/// add one or hide a revocation.
pub fn manifest_index(data: &[u8]) {
    let p = parts(data, 3);
    let state = scratch("index", false);
    let manifest = state.join("manifest.json");
    let _ = std::fs::create_dir_all(state.join("checkpoints"));
    let _ = std::fs::create_dir_all(state.join("manifest-index"));
    if std::fs::write(state.join("checkpoints/mac.key"), MAC_KEY).is_err()
        || std::fs::write(&manifest, p[0]).is_err()
    {
        return;
    }
    let (Some(at), Ok(meta)) = (
        governed_runner::gate::manifest_index::index_path(&state, &manifest),
        std::fs::metadata(&manifest),
    ) else {
        return;
    };
    let index = p.get(1).copied().unwrap_or_default();
    let mut body = String::from_utf8_lossy(index).replace(
        "@STAMP@",
        &governed_runner::gate::manifest_index::stamp(&meta),
    );
    let mac = journal::hmac_sha256(&MAC_KEY, body.as_bytes());
    body.push_str(&format!("mac {}\n", hex::encode(mac)));
    if std::fs::write(&at, body).is_err() {
        return;
    }
    let id = p.get(2).map_or("lease-1".into(), |b| {
        String::from_utf8_lossy(b).into_owned()
    });
    let selection = governed_runner::gate::admission::Selection::LeaseId(id);
    let Ok(loaded) = governed_runner::gate::manifest_index::load_for(&manifest, &state, &selection)
    else {
        return;
    };
    if let Ok(full) = governed_runner::gate::lease::parse_manifest(&manifest, p[0]) {
        let got = &loaded.manifest;
        assert_eq!(got.revocations, full.revocations, "revocations differ");
        assert_eq!(got.superseded, full.superseded, "supersessions differ");
        for l in &got.leases {
            assert!(
                full.leases.contains(l),
                "a lease came through the index that the manifest does not hold"
            );
        }
    }
}

/// Whether `s` holds a character that would act on a terminal (line
/// breaks aside).
fn unsafe_char(s: &str) -> Option<char> {
    s.chars()
        .find(|c| *c != '\n' && governed_evidence::escape::is_unsafe(*c))
}

/// `receipt show --format text|markdown` on an unsigned file (the views
/// do not check the signature): an envelope whose payload is decoded, or a
/// statement as is. Never a panic; no character that acts on a terminal
/// (escape sequences, bidi overrides, invisibles) in either view; every
/// markdown table row has exactly its three cell borders; no stream line
/// closes its code fence.
pub fn receipt_view(data: &[u8]) {
    let stmt: serde_json::Value = match serde_json::from_slice::<governed_model::Envelope>(data) {
        Ok(env) => {
            match sign::b64_decode(&env.payload).and_then(|b| serde_json::from_slice(&b).ok()) {
                Some(v) => v,
                None => return,
            }
        }
        Err(_) => match serde_json::from_slice(data) {
            Ok(v) => v,
            Err(_) => return,
        },
    };
    if !stmt["predicate"].is_object() {
        return;
    }
    let text = governed_evidence::view::receipt_text(&stmt);
    if let Some(c) = unsafe_char(&text) {
        panic!("the text view printed {c:?}");
    }
    let md = governed_evidence::view::receipt_markdown(&stmt);
    if let Some(c) = unsafe_char(&md) {
        panic!("the markdown view printed {c:?}");
    }
    check_markdown(&md);
}

/// Table rows keep three unescaped `|`; fenced blocks are closed only by
/// their fence.
fn check_markdown(md: &str) {
    let mut fence: Option<String> = None;
    for line in md.lines() {
        if let Some(f) = &fence {
            if line == f {
                fence = None;
            } else {
                assert!(
                    !line.trim_start().starts_with(f.as_str()),
                    "a stream line closes its fence: {line:?}"
                );
            }
            continue;
        }
        if line.starts_with("```") {
            let f: String = line.chars().take_while(|c| *c == '`').collect();
            fence = Some(f);
            continue;
        }
        if line.starts_with('|') {
            let mut borders = 0;
            let mut escaped = false;
            for c in line.chars() {
                match (c, escaped) {
                    ('\\', false) => escaped = true,
                    ('|', false) => borders += 1,
                    _ => escaped = false,
                }
            }
            assert_eq!(borders, 3, "a table row does not have two cells: {line:?}");
        }
    }
}

/// A Goal's rows in the PostgreSQL ledger, as a holder of the database's
/// credentials could write them. The input is `JOURNAL \0 EDITS`: the
/// journal's lines re-linked into a chain become rows `(seq, digest,
/// line)` with a head row naming the last; each line of EDITS
/// (`ROW seq|digest|line VALUE`, or `head next_seq|last VALUE`) then
/// changes one column. `pg::check_rows` accepts the rows only when, read
/// independently here, every stored `seq` and `digest` is its line's, the
/// lines form the chain, and the head names the last record.
pub fn pg_rows(data: &[u8]) {
    use governed_ledger::pg::{check_rows, PgTarget, StoredRow};
    let p = parts(data, 2);
    let (lines, digests) = rechain(p[0], 0, journal::GENESIS, &[]);
    let mut rows: Vec<StoredRow> = lines
        .iter()
        .zip(&digests)
        .enumerate()
        .map(|(i, (l, d))| StoredRow {
            seq: i as i64,
            digest: d.clone(),
            line: l.clone(),
        })
        .collect();
    let mut next_seq = rows.len() as i64;
    let mut last = digests
        .last()
        .cloned()
        .unwrap_or_else(|| journal::GENESIS.into());
    for edit in String::from_utf8_lossy(p.get(1).copied().unwrap_or_default()).lines() {
        let mut f = edit.splitn(3, ' ');
        let (Some(which), Some(col), Some(value)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if which == "head" {
            match col {
                "next_seq" => next_seq = value.parse().unwrap_or(next_seq),
                _ => last = value.to_string(),
            }
            continue;
        }
        let Some(row) = which.parse::<usize>().ok().and_then(|i| rows.get_mut(i)) else {
            continue;
        };
        match col {
            "seq" => row.seq = value.parse().unwrap_or(row.seq),
            "digest" => row.digest = value.to_string(),
            _ => row.line = value.to_string(),
        }
    }
    let target = PgTarget {
        host: "db".into(),
        port: 5432,
        dbname: "ledger".into(),
    };
    let Ok(entries) = check_rows(&target, "g", &rows, next_seq, &last) else {
        return;
    };
    let bytes = joined(&rows.iter().map(|r| r.line.clone()).collect::<Vec<_>>());
    let chain = journal::parse_chain(Path::new("rows"), &bytes)
        .unwrap_or_else(|e| panic!("rows accepted whose lines are no chain: {e}"));
    assert_eq!(chain.len(), rows.len(), "rows accepted with lines left out");
    assert_eq!(entries.len(), rows.len());
    for (r, e) in rows.iter().zip(&chain) {
        assert_eq!(
            r.seq, e.record.seq as i64,
            "a row's stored seq is not its line's"
        );
        assert_eq!(
            r.digest, e.digest,
            "a row's stored digest is not its line's"
        );
    }
    match chain.last() {
        Some(e) => assert!(
            last == e.digest && next_seq == e.record.seq as i64 + 1,
            "a head row not naming the last record was accepted"
        ),
        None => assert!(next_seq == 0 && last == journal::GENESIS),
    }
}

/// libpq's `.pgpass` escaping of one field.
fn pgpass_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace(':', "\\:")
}

/// The ledger's credential files (`.pgpass`, `.pg_service.conf`) and its
/// address. The input is `TEXT \0 HOST \0 PORT \0 DB \0 USER \0 PASSWORD`:
/// TEXT is looked up as a `.pgpass` and read as a service file (section
/// `HOST`), and its first line parsed as a `--ledger` address (which must
/// read back the same from its display). A `.pgpass` line written from the
/// five fields with libpq's escapes, put first, gives back exactly that
/// password; a service file `[HOST]` with one `USER=PASSWORD` gives back
/// that entry.
pub fn pg_credentials(data: &[u8]) {
    use governed_ledger::pg::{pgpass_lookup, service_section, PgTarget};
    let p: Vec<String> = parts(data, 6)
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    let text = &p[0];
    let field = |i: usize| p.get(i).map_or("", String::as_str);
    let want = [field(1), field(2), field(3), field(4)];
    let _ = pgpass_lookup(text, want);
    let _ = service_section(text, field(1));
    if let Ok(t) = PgTarget::parse(text.lines().next().unwrap_or_default()) {
        assert_eq!(
            PgTarget::parse(&t.to_string()).ok(),
            Some(t.clone()),
            "a ledger address does not read back as itself"
        );
    }
    let one_line = |s: &str| !s.contains(['\n', '\r']);
    if p.len() == 6 && p[1..].iter().all(|s| one_line(s)) && want.iter().all(|w| *w != "*") {
        let line: Vec<String> = p[1..].iter().map(|s| pgpass_escape(s)).collect();
        let line = line.join(":");
        if !line.starts_with('#') {
            let file = format!("{line}\n{text}");
            assert_eq!(
                pgpass_lookup(&file, want),
                Some(p[5].clone()),
                ".pgpass line {line:?} does not give back its password"
            );
        }
        let (section, key, value) = (field(1).trim(), field(4).trim(), field(5).trim());
        let plain = |s: &str| !s.is_empty() && !s.contains(['[', ']', '=', '#']);
        if plain(section) && plain(key) && !value.contains(['\n', '\r']) {
            let file = format!("[{section}]\n{key}={value}\n");
            let got = service_section(&file, section);
            assert_eq!(
                got,
                BTreeMap::from([(key.to_string(), value.to_string())]),
                "service file {file:?}"
            );
        }
    }
}

/// The approvals file (`approve --file`), which a reviewer reads and a
/// pull request may change: parsed in its closed shape; an error names a
/// line of the file; each entry's line is a line of the file, in order;
/// the line helpers never panic, whatever the line asked for.
pub fn approvals(data: &[u8]) {
    use governed_model::approvals as a;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let count = text.lines().count().max(1);
    match a::parse(text) {
        Err(e) => {
            assert!(
                (1..=count + 1).contains(&e.line),
                "an error points at line {} of {count}",
                e.line
            );
            let _ = a::entry_at(text, e.line);
            let _ = a::key_line(text, e.line, "run");
        }
        Ok(parsed) => {
            assert_eq!(parsed.lines.len(), parsed.file.command.len());
            assert!(
                parsed.lines.windows(2).all(|w| w[0] <= w[1]),
                "entries out of order: {:?}",
                parsed.lines
            );
            for &l in &parsed.lines {
                assert!((1..=count + 1).contains(&l), "entry at line {l} of {count}");
                let _ = a::entry_at(text, l);
                let _ = a::key_line(text, l, "run");
            }
        }
    }
    let _ = a::entry_at(text, usize::MAX);
    let _ = a::line_of(text, usize::MAX);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every saved input of a target: its seeds and its regressions.
    fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("fuzz");
        let mut out = Vec::new();
        for dir in [
            root.join("seeds").join(target),
            root.join("regressions").join(target),
        ] {
            if let Ok(rd) = std::fs::read_dir(dir) {
                for f in rd.flatten() {
                    out.push((f.path(), std::fs::read(f.path()).expect("read")));
                }
            }
        }
        out
    }

    /// The seeds and every crash input found so far (`fuzz/regressions/`)
    /// of the targets whose entry point lives here replay without a panic.
    #[test]
    fn seeds_and_regressions_replay() {
        type Target = (&'static str, fn(&[u8]));
        let targets: [Target; 10] = [
            ("verify_envelope", verify_envelope),
            ("checkpoint", checkpoint),
            ("lease", lease),
            ("pem_key", pem_key),
            ("output_projection", output_projection),
            ("git_head", git_head),
            ("manifest_index", manifest_index),
            ("receipt_view", receipt_view),
            ("pg_rows", pg_rows),
            ("pg_credentials", pg_credentials),
        ];
        for (target, f) in targets {
            let all = inputs(target);
            assert!(!all.is_empty(), "{target} has no seeds");
            for (path, d) in all {
                eprintln!("{}", path.display());
                f(&d);
            }
        }
        for (_, d) in inputs("approvals") {
            approvals(&d);
        }
    }

    fn seed(target: &str, name: &str) -> Vec<u8> {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("fuzz/seeds")
            .join(target)
            .join(name);
        std::fs::read(path).expect("seed")
    }

    /// The seeds get past the signature into the judgement: one statement
    /// meets every criterion and its journal cross-check, one fails many.
    #[test]
    fn verify_seeds_reach_the_judgement() {
        for name in ["done-with-journal.bin", "done-no-journal.bin"] {
            let v = judge_signed(&seed("verify_envelope", name)).expect("a signed input");
            assert!(v.done(), "{name}: {:?}", v.unmet);
        }
        let v = judge_signed(&seed("verify_envelope", "unmet.bin")).expect("signed");
        for check in [
            "signing_key_in_child_reach",
            "outcome",
            "exit_code",
            "no_leftover_processes",
            "journal",
        ] {
            assert!(
                v.unmet.iter().any(|u| u.starts_with(check)),
                "{check} not unmet: {:?}",
                v.unmet
            );
        }
        let v = judge_signed(&seed("verify_envelope", "mismatch-resources.bin")).expect("signed");
        for check in [
            "format: statement type",
            "goal: receipt is for goal",
            "goal: receipt is for revision",
            "goal: receipt's goal digest",
            "format: product",
            "resources",
            "network",
        ] {
            assert!(
                v.unmet.iter().any(|u| u.starts_with(check)),
                "{check} not unmet: {:?}",
                v.unmet
            );
        }
        let v =
            judge_signed(&seed("verify_envelope", "resources-network-links.bin")).expect("signed");
        for check in [
            "resources",
            "network",
            "file \"link\"",
            "file \"escape\"",
            "file \"sub\"",
        ] {
            assert!(
                v.unmet.iter().any(|u| u.starts_with(check)),
                "{check} not unmet: {:?}",
                v.unmet
            );
        }
    }

    /// The manifest-index seeds are read through the index (not the full
    /// parse, which would return every lease).
    #[test]
    fn manifest_index_seeds_go_through_the_index() {
        for (name, ids) in [
            ("two-leases.bin", vec!["lease-1"]),
            ("by-second-id.bin", vec!["lease-2"]),
            ("left-out.bin", vec![]),
        ] {
            let data = seed("manifest_index", name);
            manifest_index(&data);
            let state = scratch("index", false);
            let id = String::from_utf8_lossy(parts(&data, 3)[2]).into_owned();
            let loaded = governed_runner::gate::manifest_index::load_for(
                &state.join("manifest.json"),
                &state,
                &governed_runner::gate::admission::Selection::LeaseId(id),
            )
            .expect("load");
            let got: Vec<&str> = loaded
                .manifest
                .leases
                .iter()
                .map(|l| l.body.lease_id.as_str())
                .collect();
            assert_eq!(got, ids, "{name}");
            assert_eq!(loaded.manifest.revocations.len(), 1, "{name}");
        }
    }
}
