//! Output is untrusted data: bounded, counted, hashed in full, projected safely.

use crate::support::*;

#[test]
fn output_cap_kills_yes_with_123() {
    let e = Env::new();
    e.approve(&["--output-cap", "1MiB"], &["yes"]);
    let r = e.run(&[], &["yes"]);
    assert_eq!(r.code, 123, "{}", r.stderr);
    assert_eq!(r.class(), "output_limit_reaped");
    assert_eq!(r.predicate()["cleanup"]["state"], "gone");
    assert!(
        r.predicate()["streams"]["stdout"]["bytes"]
            .as_u64()
            .unwrap_or(0)
            > 1024 * 1024
    );
}

#[test]
fn invalid_utf8_and_escape_sequences_never_reach_receipt_strings() {
    let e = Env::new();
    let probe = [
        "printf",
        "ok\\033[31mred\\033]0;title\\007\\377\\376\\r\\001\\n\\342\\200\\256rtl",
    ];
    e.approve(&[], &probe);
    let r = e.run(&[], &probe);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = r.stdout_text();
    for bad in ['\u{1b}', '\u{7}', '\r', '\u{1}', '\u{202E}'] {
        assert!(
            !text.contains(bad),
            "{bad:?} reached the text projection: {text:?}"
        );
    }
    assert!(text.contains("ok") && text.contains("red") && text.contains('\n'));
    // The raw JSON of the envelope is plain ASCII-safe JSON.
    assert!(serde_json::from_slice::<serde_json::Value>(&r.stdout).is_ok());
}

#[test]
fn head_and_tail_are_kept_and_the_middle_is_counted() {
    let e = Env::new();
    let probe = ["sh", "-c", "echo BEGIN; seq 1 100000; echo END"];
    e.approve(&["--keep-output", "1KiB"], &probe);
    let r = e.run(&[], &probe);
    let s = &r.predicate()["streams"]["stdout"];
    let text = s["text"].as_str().unwrap_or("");
    assert!(text.starts_with("BEGIN\n1\n"));
    assert!(text.ends_with("100000\nEND\n"));
    assert!(s["omitted_bytes"].as_u64().unwrap_or(0) > 500_000);
    assert!(text.len() < 4096);
}

#[test]
fn half_a_gibibyte_of_output_with_flat_memory_and_the_right_digest() {
    let e = Env::new();
    let probe = ["head", "-c", "512M", "/dev/zero"];
    e.approve(&["--output-cap", "1GiB"], &probe);
    // Measure governed-exec's own peak RSS through a wrapper that waits for it.
    let inner = e.run_cmd(&[], &probe);
    let mut c = std::process::Command::new("python3");
    c.arg("-c")
        .arg("import resource,subprocess,sys\np=subprocess.run(sys.argv[1:],stdout=subprocess.PIPE)\nsys.stdout.buffer.write(p.stdout)\nsys.stderr.write('MAXRSS=%d\\n'%resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\nsys.exit(p.returncode)")
        .arg(inner.get_program())
        .args(inner.get_args())
        .stdin(std::process::Stdio::null());
    let o = match c.output() {
        Ok(o) => o,
        Err(err) => {
            skip!("half_a_gibibyte_of_output: python3 unavailable ({err})");
            return;
        }
    };
    let r = finish_run(o);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = &r.predicate()["streams"]["stdout"];
    assert_eq!(s["bytes"], 512u64 * 1024 * 1024);
    // sha256 of 512 MiB of zero bytes
    assert_eq!(
        s["sha256"],
        "9acca8e8c22201155389f65abbf6bc9723edc7384ead80503839f49dcc56d767"
    );
    let rss_kib: u64 = r
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("MAXRSS="))
        .and_then(|v| v.parse().ok())
        .expect("MAXRSS");
    assert!(rss_kib < 64 * 1024, "peak RSS {rss_kib} KiB is not flat");
}

#[test]
fn stream_mirrors_output_live_to_stderr() {
    let e = Env::new();
    e.approve(&[], &["echo", "mirrored-line"]);
    let r = e.run(&["--stream"], &["echo", "mirrored-line"]);
    assert!(r.stderr.contains("mirrored-line"), "{}", r.stderr);
}

#[test]
fn keep_output_bounds_head_and_tail_together() {
    // CONTRACT §2: `--keep-output` is the kept bytes per stream.
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let e = Env::new();
    let probe = ["sh", "-c", "seq 1 5000; seq 1 3000 >&2"];
    e.approve(&["--keep-output", "1000"], &probe);
    let r = e.run(&[], &probe);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for name in ["stdout", "stderr"] {
        let s = &r.predicate()["streams"][name];
        let head = b64.decode(s["head_b64"].as_str().unwrap()).unwrap();
        let tail = b64.decode(s["tail_b64"].as_str().unwrap()).unwrap();
        assert_eq!(head.len() + tail.len(), 1000, "{name}");
        assert_eq!(
            head.len() as u64 + tail.len() as u64 + s["omitted_bytes"].as_u64().unwrap(),
            s["bytes"].as_u64().unwrap()
        );
        assert!(head.starts_with(b"1\n2\n3\n"), "{name}");
    }
    let tail = b64
        .decode(
            r.predicate()["streams"]["stdout"]["tail_b64"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
    assert!(tail.ends_with(b"4999\n5000\n"));
}

/// `--stream` in GitHub Actions: the child's `::add-mask::`/`::error::`
/// lines would act on the job; the mirror is fenced with GitHub's
/// `::stop-commands::TOKEN` … `::TOKEN::`, a token the child never sees.
#[test]
fn stream_in_github_actions_is_fenced_from_workflow_commands() {
    let e = Env::new();
    let probe = ["sh", "-c", "echo '::add-mask::hunter2'; echo '::error::forged' >&2; env | grep -c governed-exec- ; true"];
    e.approve(&["--uses", "2"], &probe);
    let mut c = e.run_cmd(&["--stream"], &probe);
    c.env("GITHUB_ACTIONS", "true");
    let r = finish_run(output(c));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let log = r.stderr.as_str();
    let start = log
        .find("::stop-commands::governed-exec-")
        .expect("fence opened");
    let token_start = start + "::stop-commands::".len();
    let token: String = log[token_start..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    let mask = log
        .find("::add-mask::hunter2")
        .expect("the child's line is mirrored");
    let end = log.find(&format!("::{token}::")).expect("fence closed");
    assert!(start < mask && mask < end, "{log}");
    assert!(
        log[..end]
            .find("::error::forged")
            .is_some_and(|p| p > start),
        "{log}"
    );
    // The child never saw the token.
    assert!(!r.stdout_text().contains(&token));

    let mut c = e.run_cmd(&["--stream"], &probe);
    c.env_remove("GITHUB_ACTIONS");
    let r = finish_run(output(c));
    assert!(!r.stderr.contains("::stop-commands::"), "{}", r.stderr);
}
