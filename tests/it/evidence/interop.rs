//! Standard tools accept what governed-exec ships: key files load in OpenSSL
//! 3 and Python `cryptography`, keys made by `openssl genpkey` work, and a
//! receipt verifies with an independent DSSE implementation (Python
//! `securesystemslib`, installed by .ci/run into target/pyenv) on the
//! runner's public key, using the key id such tools compute by default.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;

use crate::support::*;

/// The Python with `securesystemslib` and `cryptography`: `$GOVERNED_EXEC_PYTHON`
/// (scripts/test.sh sets it), else the venv .ci/run makes at target/pyenv.
/// None, after a loud SKIP, when neither is there or a module is missing.
pub fn interop_python(test: &str) -> Option<PathBuf> {
    let py = std::env::var_os("GOVERNED_EXEC_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pyenv/bin/python"));
    if !py.exists() {
        skip!(
            "{test}: no Python venv at {} (bash .ci/run creates it; or set GOVERNED_EXEC_PYTHON)",
            py.display()
        );
        return None;
    }
    let ok = Command::new(&py)
        .args(["-c", "import securesystemslib.dsse, cryptography"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        skip!(
            "{test}: {} lacks securesystemslib or cryptography (pip install them)",
            py.display()
        );
        return None;
    }
    Some(py)
}

/// OpenSSL 3's command line, or None after a loud SKIP.
fn openssl(test: &str) -> Option<()> {
    let v = Command::new("openssl").arg("version").output();
    match v {
        Ok(o) if String::from_utf8_lossy(&o.stdout).starts_with("OpenSSL 3") => Some(()),
        _ => {
            skip!("{test}: no OpenSSL 3 command line on this machine");
            None
        }
    }
}

fn interop_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(name)
}

fn run_ok(c: &mut Command) -> String {
    let o = c.output().expect("spawn");
    assert!(
        o.status.success(),
        "{c:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn pem_der(pem: &str) -> Vec<u8> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("PEM base64")
}

#[test]
fn keygen_writes_what_openssl_genpkey_writes() {
    if openssl("keygen_writes_what_openssl_genpkey_writes").is_none() {
        return;
    }
    let e = Env::new();
    let ours = std::fs::read_to_string(&e.key).unwrap();
    let theirs_path = e.path("openssl.key");
    run_ok(
        Command::new("openssl")
            .args(["genpkey", "-algorithm", "ed25519", "-out"])
            .arg(&theirs_path),
    );
    let theirs = std::fs::read_to_string(&theirs_path).unwrap();
    let (a, b) = (pem_der(&ours), pem_der(&theirs));
    // Same shape: PKCS#8 v1 (version 0), no public key attribute; only the
    // 32 secret bytes differ.
    assert_eq!(a.len(), 48, "{ours}");
    assert_eq!(a[..16], b[..16], "ours:\n{ours}\nopenssl's:\n{theirs}");
    // OpenSSL reads it and derives exactly our .pub.
    run_ok(
        Command::new("openssl")
            .args(["pkey", "-noout", "-in"])
            .arg(&e.key),
    );
    let pubout = run_ok(
        Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(&e.key),
    );
    assert_eq!(pubout, std::fs::read_to_string(&e.trust).unwrap());
    run_ok(
        Command::new("openssl")
            .args(["pkey", "-pubin", "-noout", "-in"])
            .arg(&e.trust),
    );
}

#[test]
fn keys_load_in_python_cryptography() {
    let Some(py) = interop_python("keys_load_in_python_cryptography") else {
        return;
    };
    let e = Env::new();
    // The approver key from keygen, and the runner key `run` creates.
    e.approve(&[], &["true"]);
    assert_eq!(e.run(&[], &["true"]).code, 0);
    for prefix in [e.path("approver"), e.state.join("runner")] {
        let out = run_ok(
            Command::new(&py)
                .arg(interop_script("load_keys.py"))
                .arg(&prefix),
        );
        assert_eq!(out.trim().len(), 64, "{out}");
    }
}

#[test]
fn keys_made_by_openssl_work_as_approver_and_runner_keys() {
    if openssl("keys_made_by_openssl_work_as_approver_and_runner_keys").is_none() {
        return;
    }
    let e = Env::new();
    let gen = |name: &str| {
        let key = e.path(&format!("{name}.key"));
        let public = e.path(&format!("{name}.pub"));
        run_ok(
            Command::new("openssl")
                .args(["genpkey", "-algorithm", "ed25519", "-out"])
                .arg(&key),
        );
        run_ok(
            Command::new("openssl")
                .args(["pkey", "-pubout", "-in"])
                .arg(&key)
                .arg("-out")
                .arg(&public),
        );
        (key, public)
    };
    let (ak, ap) = gen("ossl-approver");
    let (rk, rp) = gen("ossl-runner");
    let receipt = approve_and_run_with_keys(&e, &ak, &ap, &rk);
    let (code, out) = {
        let o = output(e.verify_cmd(&receipt, &rp));
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).to_string(),
        )
    };
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out.lines().next(), Some("VERIFIED_DONE"));
}

/// A key file written by an earlier release (PKCS#8 v2 with the public key
/// attribute, which OpenSSL 3.0 cannot read) still works in every role.
#[test]
fn keys_in_the_earlier_format_still_load() {
    let e = Env::new();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/keys");
    let key = fixtures.join("pkcs8-v2-with-public-key.key");
    let public = fixtures.join("pkcs8-v2-with-public-key.pub");
    assert_eq!(pem_der(&std::fs::read_to_string(&key).unwrap())[4], 1, "v2");
    let receipt = approve_and_run_with_keys(&e, &key, &public, &key);
    let o = output(e.verify_cmd(&receipt, &public));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// ed25519 is deterministic: OpenSSL signing the DSSE PAE of the receipt's
/// payload with the runner key yields exactly the envelope's signature, and
/// OpenSSL verifies that signature with the runner's public key.
#[test]
fn openssl_reproduces_and_verifies_the_receipt_signature() {
    if openssl("openssl_reproduces_and_verifies_the_receipt_signature").is_none() {
        return;
    }
    let e = Env::new();
    e.approve(&[], &["true"]);
    let (_, receipt) = e.run_to_file("r.json", &["true"]);
    let env: serde_json::Value = serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = b64.decode(env["payload"].as_str().unwrap()).unwrap();
    let ptype = env["payloadType"].as_str().unwrap();
    let mut pae = format!("DSSEv1 {} {ptype} {} ", ptype.len(), payload.len()).into_bytes();
    pae.extend_from_slice(&payload);
    let pae_path = e.path("pae.bin");
    std::fs::write(&pae_path, &pae).unwrap();
    let sig_path = e.path("sig.bin");
    std::fs::write(
        &sig_path,
        b64.decode(env["signatures"][0]["sig"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    let out = run_ok(
        Command::new("openssl")
            .args(["pkeyutl", "-verify", "-rawin", "-pubin", "-inkey"])
            .arg(e.runner_pub())
            .arg("-in")
            .arg(&pae_path)
            .arg("-sigfile")
            .arg(&sig_path),
    );
    assert!(out.contains("Signature Verified Successfully"), "{out}");
    let resigned = e.path("resigned.bin");
    run_ok(
        Command::new("openssl")
            .args(["pkeyutl", "-sign", "-rawin", "-inkey"])
            .arg(e.state.join("runner.key"))
            .arg("-in")
            .arg(&pae_path)
            .arg("-out")
            .arg(&resigned),
    );
    assert_eq!(
        std::fs::read(&resigned).unwrap(),
        std::fs::read(&sig_path).unwrap()
    );
}

#[test]
fn receipts_verify_with_securesystemslib_dsse_by_default_keyid() {
    let Some(py) = interop_python("receipts_verify_with_securesystemslib_dsse_by_default_keyid")
    else {
        return;
    };
    let e = Env::new();
    e.approve(&[], &["true"]);
    let (_, receipt) = e.run_to_file("r.json", &["true"]);
    let dsse = |receipt: &Path, key: &Path| {
        let o = Command::new(&py)
            .arg(interop_script("dsse_verify.py"))
            .arg(receipt)
            .arg(key)
            .output()
            .expect("python");
        (
            o.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    };
    let (code, out) = dsse(&receipt, &e.runner_pub());
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out.trim(), "exited");
    // A refusal receipt is signed too, and verifies the same way.
    let (r, refusal) = e.run_to_file("refusal.json", &["false"]);
    assert_eq!(r.code, 125);
    let (code, out) = dsse(&refusal, &e.runner_pub());
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out.trim(), "known_not_executed");
    // The wrong key, and an edited payload, fail.
    let (code, out) = dsse(&receipt, &e.trust);
    assert_eq!(code, Some(1), "{out}");
    let mut env: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = String::from_utf8(b64.decode(env["payload"].as_str().unwrap()).unwrap())
        .unwrap()
        .replace("\"exited\"", "\"signaled\"");
    env["payload"] = b64.encode(payload).into();
    let edited = e.path("edited.json");
    std::fs::write(&edited, serde_json::to_vec(&env).unwrap()).unwrap();
    let (code, out) = dsse(&edited, &e.runner_pub());
    assert_eq!(code, Some(1), "{out}");
}

/// Approve `true` with `approver_key`, then run it trusting `approver_pub`
/// and signing with `runner_key`; both must succeed. Returns the receipt.
fn approve_and_run_with_keys(
    e: &Env,
    approver_key: &Path,
    approver_pub: &Path,
    runner_key: &Path,
) -> PathBuf {
    let approve = ApproveFiles {
        key: approver_key,
        ..e.approve_files()
    };
    let o = output(approve_cmd_with(approve, &[], &["true"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let receipt = e.path("r.json");
    let run = RunFiles {
        trust: approver_pub,
        ..e.files()
    };
    let flags = [
        "--key",
        runner_key.to_str().unwrap(),
        "--receipt",
        receipt.to_str().unwrap(),
    ];
    let o = output(run_cmd_with(run, &flags, &["true"]));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    receipt
}
