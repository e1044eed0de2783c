//! Human views: `receipt show --format text|markdown` and `verify --format
//! markdown`. What a person reads must say what happened, fit a terminal,
//! and never let the child's bytes act on the screen or break the table.

use base64::Engine;
use serde_json::Value;

use crate::support::*;

/// `receipt show RECEIPT [--format F]`: (exit code, stdout).
fn show(receipt: &std::path::Path, format: Option<&str>) -> (i32, String) {
    let mut c = cmd();
    c.arg("receipt").arg("show").arg(receipt);
    if let Some(f) = format {
        c.args(["--format", f]);
    }
    let o = output(c);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8(o.stdout).expect("views print UTF-8"),
    )
}

/// A child that prints 30 numbered lines, then terminal escapes, a bidi
/// override, a zero-width space, markdown table and fence breakers.
const HOSTILE: &str = "for i in $(seq 1 30); do echo \"line $i\"; done; echo 日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日日; \
     printf 'A\\033[2J\\033]0;title\\007B\\n'; printf 'x\\342\\200\\256y\\342\\200\\213z\\n'; \
     printf '| a | b |\\n````\\n'; echo done > 'out|`x`.txt'; echo warn >&2";

const HOSTILE_GOAL: &str = r#"{ "schema": "governed-exec/goal/v1", "id": "views", "revision": 2,
  "criteria": [ { "kind": "exit_code", "equals": 0 },
                { "kind": "file", "path": "out|`x`.txt", "contains": "done" },
                { "kind": "file", "path": "never.txt", "exists": true },
                { "kind": "no_leftover_processes" } ] }"#;

fn hostile_receipt(e: &Env) -> std::path::PathBuf {
    e.set_goal(HOSTILE_GOAL);
    let cmdline = ["sh", "-c", HOSTILE];
    e.approve(&[], &cmdline);
    let (r, receipt) = e.run_to_file("r.json", &cmdline);
    assert_eq!(r.code, 0, "{}", r.stderr);
    receipt
}

fn assert_no_unsafe_chars(out: &str) {
    for c in out.chars() {
        assert!(
            c == '\n' || !(c.is_control() || ('\u{2000}'..='\u{206F}').contains(&c) && c != '…'),
            "unsafe char {:?} in view:\n{out}",
            c
        );
    }
}

#[test]
fn text_view_says_what_happened_and_fits_a_terminal() {
    let e = Env::new();
    let receipt = hostile_receipt(&e);
    let (code, out) = show(&receipt, Some("text"));
    assert_eq!(code, 0);
    for want in [
        "outcome      exited",
        "exit code 0",
        "needs human  no",
        "duration",
        "executable   /",
        "binding      machine",
        "cwd",
        "cleanup      gone",
        "isolation",
        "NOT an OS sandbox",
        "signing key",
        "products     out|`x`.txt  5 bytes  sha256 ",
        "never.txt  MISSING",
        "stdout: ",
        "stderr: 5 bytes",
        "| warn",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    // The executable's short digest is the receipt's.
    let stmt = decode_envelope(&std::fs::read(&receipt).expect("read"));
    let sha = stmt["predicate"]["command"]["sha256"]
        .as_str()
        .expect("sha");
    assert!(out.contains(&sha[..12]), "{out}");
    // Only the last lines of the stream: line 30 is there, line 5 is not.
    assert!(out.contains("| line 30\n"), "{out}");
    assert!(!out.contains("| line 5\n"), "{out}");
    // Never raw child bytes: no ESC, BEL, bidi override or zero-width space.
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out}");
    assert!(
        !out.contains('\u{202E}') && !out.contains('\u{200B}'),
        "{out}"
    );
    // The capture already replaced the bidi override; the view escapes the
    // zero-width space the capture let through.
    assert!(out.contains("x\u{FFFD}y\\u{200b}z"), "{out}");
    assert_no_unsafe_chars(&out);
    // Terminal columns: CJK ideographs take two.
    let columns = |l: &str| {
        l.chars()
            .map(|c| {
                if ('\u{4E00}'..='\u{9FFF}').contains(&c) {
                    2
                } else {
                    1
                }
            })
            .sum::<usize>()
    };
    assert!(out.contains("| 日日"), "{out}");
    for line in out.lines() {
        assert!(
            columns(line) <= 100,
            "line longer than 100 columns: {line:?}"
        );
    }
}

/// Cells of a markdown table row, split on unescaped `|`.
fn cells(line: &str) -> usize {
    let mut n: usize = 0;
    let mut escaped = false;
    for c in line.chars() {
        match c {
            '\\' if !escaped => escaped = true,
            '|' if !escaped => {
                n += 1;
                escaped = false
            }
            _ => escaped = false,
        }
    }
    n.saturating_sub(1)
}

#[test]
fn markdown_view_is_a_table_child_bytes_cannot_break() {
    let e = Env::new();
    let receipt = hostile_receipt(&e);
    let (code, out) = show(&receipt, Some("markdown"));
    assert_eq!(code, 0);
    assert!(
        out.starts_with("### governed-exec receipt: exited\n"),
        "{out}"
    );
    let table: Vec<&str> = out.lines().filter(|l| l.starts_with('|')).collect();
    assert!(table.len() > 12, "{out}");
    for l in &table {
        assert_eq!(cells(l), 2, "a row with other than two cells: {l:?}");
    }
    assert!(out.contains("| needs human | no |"), "{out}");
    assert!(out.contains(r"out\|\`x\`.txt"), "{out}");
    assert_no_unsafe_chars(&out);
    // The stdout tail sits in a fence longer than the child's ```` line, so
    // the fence closes where the view closes it.
    let lines: Vec<&str> = out.lines().collect();
    let open = lines
        .iter()
        .position(|l| l.starts_with("`````") && l.ends_with("text"))
        .expect("a five-backtick fence around stdout");
    let fence = lines[open].trim_end_matches("text");
    let close = open
        + 1
        + lines[open + 1..]
            .iter()
            .position(|l| *l == fence)
            .expect("closing fence");
    assert_eq!(lines[close - 1], "````", "{out}");
    assert_eq!(lines[open + 1..close].len(), 10, "ten tail lines: {out}");
}

#[test]
fn json_is_the_default_format_and_unchanged() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let (_, receipt) = e.run_to_file("r.json", &["true"]);
    let (code, default) = show(&receipt, None);
    assert_eq!(code, 0);
    let (_, json) = show(&receipt, Some("json"));
    assert_eq!(default, json);
    let v: Value = serde_json::from_str(&default).expect("json");
    assert_eq!(v["predicate"]["outcome"]["class"], "exited");
    let (code, _) = show(&receipt, Some("yaml"));
    assert_eq!(code, 2);
}

#[test]
fn a_refusal_reads_as_one_that_needs_a_person() {
    let e = Env::new();
    e.approve(&[], &["false"]);
    let r = e.run(
        &["--receipt", e.path("r.json").to_str().unwrap()],
        &["true"],
    );
    assert_eq!(r.code, 125, "{}", r.stderr);
    let (code, out) = show(&e.path("r.json"), Some("text"));
    assert_eq!(code, 0);
    assert!(
        out.contains("outcome      known_not_executed (no_matching_lease)"),
        "{out}"
    );
    assert!(out.contains("needs human  YES"), "{out}");
    assert!(out.contains("none (nothing ran)"), "{out}");
}

/// Fields another release adds under `predicate` are shown, not fatal.
#[test]
fn views_tolerate_and_show_fields_added_later() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let (_, receipt) = e.run_to_file("r.json", &["true"]);
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut env: Value = serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
    let mut stmt: Value =
        serde_json::from_slice(&b64.decode(env["payload"].as_str().unwrap()).unwrap()).unwrap();
    let p = &mut stmt["predicate"];
    p["spawn_path"] = "clone3".into();
    p["binding"] = "portable".into();
    p["workspace"] = serde_json::json!({ "path": "/w", "git_head": "abc123" });
    p["cleanup"]["witness"] = "cgroup.populated".into();
    p["cleanup"]["evadable"] = true.into();
    p["isolation"]["process_limit"] = serde_json::json!({ "mechanism": "pids_cgroup_v2" });
    p["future_thing"] = serde_json::json!({ "level": 3 });
    env["payload"] = b64.encode(serde_json::to_vec(&stmt).unwrap()).into();
    std::fs::write(&receipt, serde_json::to_vec(&env).unwrap()).unwrap();
    let (code, out) = show(&receipt, Some("text"));
    assert_eq!(code, 0, "{out}");
    // Where a line wraps depends on this machine's values (uids, groups).
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    for want in [
        "spawn_path clone3",
        "binding portable",
        "workspace /w (git_head abc123)",
        "witness cgroup.populated",
        "EVADABLE",
        "process limit mechanism",
        "future_thing level 3",
    ] {
        assert!(flat.contains(want), "missing {want:?} in:\n{out}");
    }
    let (code, md) = show(&receipt, Some("markdown"));
    assert_eq!(code, 0);
    assert!(md.contains(r"| spawn\_path | clone3 |"), "{md}");
}

#[test]
fn verify_markdown_has_one_row_per_criterion() {
    let e = Env::new();
    let receipt = hostile_receipt(&e);
    let mut c = e.verify_cmd(&receipt, &e.runner_pub());
    c.args(["--format", "markdown", "--state-dir"])
        .arg(&e.state);
    let o = output(c);
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert_eq!(out.lines().next(), Some("NOT_VERIFIED"));
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("| ")).collect();
    for l in &rows {
        assert_eq!(cells(l), 3, "{l:?}");
    }
    let row = |prefix: &str| {
        rows.iter()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no row {prefix:?} in:\n{out}"))
            .to_string()
    };
    assert!(row("| authentic").contains("| met |"));
    assert!(row(r"| exit\_code equals 0").contains("| met |"));
    assert!(row(r"| file out\|\`x\`.txt exists contains").contains("| met |"));
    let never = row("| file never.txt exists");
    assert!(
        never.contains("| **unmet** |") && never.contains("missing"),
        "{never}"
    );
    let leftover = row(r"| no\_leftover\_processes");
    if is_root() {
        // A full-root child could have hidden from every cleanup witness.
        assert!(
            leftover.contains("| **unmet** |") && leftover.contains("evadable"),
            "{leftover}"
        );
    } else {
        assert!(leftover.contains("| met |"), "{leftover}");
    }
    assert!(row("| journal closes the attempt").contains("| met |"));
    assert_no_unsafe_chars(&out);

    // The text verdict and --json keep their contract.
    let (code, text) = e.verify(&receipt);
    assert_eq!(code, 1);
    assert_eq!(text.lines().next(), Some("NOT_VERIFIED"));
    let mut c = e.verify_cmd(&receipt, &e.runner_pub());
    c.arg("--json");
    let j: Value = serde_json::from_slice(&output(c).stdout).unwrap();
    assert_eq!(j["verdict"], "NOT_VERIFIED");
    let mut c = e.verify_cmd(&receipt, &e.runner_pub());
    c.args(["--json", "--format", "markdown"]);
    assert_eq!(output(c).status.code(), Some(2));
}

#[test]
fn verify_markdown_of_a_forged_receipt_checks_nothing_else() {
    let e = Env::new();
    e.approve(&[], &["true"]);
    let (_, receipt) = e.run_to_file("r.json", &["true"]);
    // Trust the approver's key instead of the runner's: not authentic.
    let mut c = e.verify_cmd(&receipt, &e.trust);
    c.args(["--format", "markdown"]);
    let o = output(c);
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(out.lines().next(), Some("NOT_VERIFIED"));
    assert!(
        out.contains("| authentic (runner signature) | **unmet** |"),
        "{out}"
    );
    assert!(
        out.contains(r"| exit\_code equals 0 | not checked |"),
        "{out}"
    );
}
