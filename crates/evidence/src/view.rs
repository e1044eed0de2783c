//! Human views of the evidence: `receipt show --format text|markdown` and
//! `verify --format markdown`.
//!
//! The views read the decoded statement as plain JSON, not the typed
//! receipt, so a field another release added is still shown (in an "other"
//! row) rather than failing the view. Every string that came from the
//! receipt — paths, messages, the child's output — goes through
//! [`escape`](crate::escape) first: a receipt file is untrusted input here
//! (`receipt show` does not check its signature; `verify` does).
//!
//! Text fits a terminal: values wrap at [`WIDTH`] columns; only a single
//! path or digest longer than that stays on one line. Stream tails are the
//! receipt's text projection, never the raw base64 head/tail bytes.

use serde_json::Value;

use crate::escape::{char_columns, columns, markdown_cell, markdown_fence, visible};
use governed_model::units::{self, format_ms};
use governed_model::Criterion;

/// The widest line a text view prints (unbreakable words excepted).
pub(crate) const WIDTH: usize = 100;
const LABEL: usize = 13;
/// Lines of each stream's tail shown.
pub(crate) const TAIL_LINES: usize = 10;

/// One labelled row of a view.
struct Row {
    label: String,
    value: String,
}

fn row(label: &str, value: impl Into<String>) -> Row {
    Row {
        label: label.to_string(),
        value: value.into(),
    }
}

fn s<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn short(hex: &str) -> String {
    visible(hex.get(..12).unwrap_or(hex))
}

/// A JSON value as a short, safe, one-line phrase.
fn phrase(v: &Value) -> String {
    match v {
        Value::Null => "none".into(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::Number(n) => n.to_string(),
        Value::String(t) => visible(t),
        Value::Array(a) if a.is_empty() => "none".into(),
        Value::Array(a) => a.iter().map(phrase).collect::<Vec<_>>().join(", "),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{} {}", visible(k), phrase(v)))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn signal_name(n: i64) -> &'static str {
    match n {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => "signal",
    }
}

/// Predicate keys the rows below render; anything else goes to "other".
const KNOWN: &[&str] = &[
    "network",
    "schema",
    "receipt_id",
    "attempt_id",
    "goal",
    "lease",
    "request",
    "workspace",
    "command",
    "cwd",
    "outcome",
    "cleanup",
    "streams",
    "products",
    "started_at",
    "ended_at",
    "duration_ms",
    "resources",
    "limits",
    "isolation",
    "signing",
    "journal_record_sha256",
    "runner_version",
    "binding",
];

fn outcome_rows(p: &Value, rows: &mut Vec<Row>) {
    let o = &p["outcome"];
    let class = s(o, "class").map_or("?".into(), visible);
    let outcome = match s(o, "reason") {
        Some(r) => format!("{class} ({})", visible(r)),
        None => class,
    };
    rows.push(row("outcome", outcome));
    let exit = match (
        o.get("exit_code").and_then(Value::as_i64),
        o.get("signal").and_then(Value::as_i64),
    ) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(n)) => format!("signal {n} ({})", signal_name(n)),
        (None, None) if s(o, "class") == Some("known_not_executed") => "none (nothing ran)".into(),
        (None, None) => "none (the program did not exit by itself)".into(),
    };
    let runner = o
        .get("runner_exit_code")
        .and_then(Value::as_i64)
        .map_or(String::new(), |c| format!("; governed-exec exits {c}"));
    rows.push(row("exit", format!("{exit}{runner}")));
    let needs = o.get("needs_human").and_then(Value::as_bool);
    rows.push(row(
        "needs human",
        match needs {
            Some(true) => "YES: do not retry; a person must act",
            Some(false) => "no",
            None => "not stated",
        },
    ));
    if let Some(m) = s(o, "message") {
        rows.push(row("detail", visible(m)));
    }
}

fn identity_rows(p: &Value, rows: &mut Vec<Row>) {
    let dur = p
        .get("duration_ms")
        .and_then(Value::as_u64)
        .map_or("?".into(), format_ms);
    let when = match (s(p, "started_at"), s(p, "ended_at")) {
        (Some(a), Some(b)) => format!(" ({} to {})", visible(a), visible(b)),
        _ => String::new(),
    };
    rows.push(row("duration", format!("{dur}{when}")));
    if let Some(g) = p.get("goal").filter(|g| g.is_object()) {
        rows.push(row(
            "goal",
            format!(
                "{} revision {} (sha256 {})",
                s(g, "id").map_or("?".into(), visible),
                phrase(&g["revision"]),
                s(g, "sha256").map_or("?".into(), short)
            ),
        ));
    }
    if let Some(l) = p.get("lease").filter(|l| l.is_object()) {
        rows.push(row(
            "lease",
            format!(
                "{} (fingerprint {})",
                s(l, "id").map_or("?".into(), visible),
                s(l, "fingerprint").map_or("?".into(), short)
            ),
        ));
    }
    match p.get("command").filter(|c| c.is_object()) {
        Some(c) => {
            let mut v = format!(
                "{} sha256 {}",
                s(c, "canonical_path").map_or("?".into(), visible),
                s(c, "sha256").map_or("?".into(), short)
            );
            if let Some(req) = s(c, "requested") {
                if Some(req) != s(c, "canonical_path") {
                    v.push_str(&format!(" (requested as {})", visible(req)));
                }
            }
            if let Some(i) = s(c, "interpreter") {
                v.push_str(&format!("; script for {}", visible(i)));
            }
            rows.push(row("executable", v));
        }
        None => rows.push(row("executable", "none resolved (nothing ran)")),
    }
    if let Some(r) = p.get("request").filter(|r| r.is_object()) {
        let words: Vec<String> = std::iter::once(&r["executable"])
            .chain(r["argv"].as_array().into_iter().flatten())
            .map(|w| visible(&serde_json::to_string(w).unwrap_or_default()))
            .collect();
        rows.push(row(
            "argv",
            format!(
                "[{}] profile {}",
                words.join(", "),
                s(r, "profile").map_or("not given".into(), visible)
            ),
        ));
    }
    let binding = match p.get("binding") {
        Some(Value::String(b)) => Some(visible(b)),
        Some(v @ Value::Object(_)) => Some(phrase(v)),
        // Receipts from before portable leases: machine binding was the only one.
        _ if p["command"].is_object() => Some("machine".to_string()),
        _ => None,
    };
    if let Some(b) = binding {
        rows.push(row("binding", b));
    }
    match p.get("workspace") {
        Some(Value::String(w)) => rows.push(row("workspace", visible(w))),
        Some(Value::Object(m)) => {
            // A portable run's workspace: its path first, then what else
            // identifies it (e.g. the git HEAD).
            let mut rest = m.clone();
            let path = rest.remove("path").map_or("?".into(), |v| phrase(&v));
            let extra = phrase(&Value::Object(rest));
            rows.push(row(
                "workspace",
                if extra.is_empty() {
                    path
                } else {
                    format!("{path} ({extra})")
                },
            ));
        }
        _ => {}
    }
    if let Some(c) = p.get("cwd").filter(|c| c.is_object()) {
        rows.push(row("cwd", s(c, "path").map_or("?".into(), visible)));
    }
}

fn cleanup_row(p: &Value, rows: &mut Vec<Row>) {
    let c = &p["cleanup"];
    let Some(m) = c.as_object() else { return };
    let mut parts = vec![s(c, "state").map_or("?".into(), visible)];
    if let Some(w) = c.get("witness") {
        parts.push(format!("witness {}", phrase(w)));
    }
    if let Some(e) = c.get("evadable").and_then(Value::as_bool) {
        parts.push(
            if e {
                "EVADABLE: a process of the run could have escaped the witness"
            } else {
                "not evadable"
            }
            .into(),
        );
    }
    if let Some(mech) = s(c, "mechanism") {
        parts.push(format!("via {}", visible(mech)));
    }
    let left = c
        .get("leftover_processes_killed")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    parts.push(format!("{left} leftover process(es) killed"));
    if let Some(pids) = c.get("unconfirmed_pids").and_then(Value::as_array) {
        if !pids.is_empty() {
            parts.push(format!(
                "NOT CONFIRMED GONE: pids {}",
                phrase(&Value::Array(pids.clone()))
            ));
        }
    }
    for (k, v) in m {
        let known = [
            "state",
            "witness",
            "evadable",
            "mechanism",
            "leftover_processes_killed",
            "unconfirmed_pids",
        ];
        if !known.contains(&k.as_str()) {
            parts.push(format!("{} {}", visible(k), phrase(v)));
        }
    }
    rows.push(row("cleanup", parts.join("; ")));
}

fn isolation_rows(p: &Value, rows: &mut Vec<Row>) {
    let Some(i) = p.get("isolation").and_then(Value::as_object) else {
        rows.push(row("isolation", "not reported (nothing ran)"));
        return;
    };
    let mut enforced = Vec::new();
    let mut always = Vec::new();
    for (k, v) in i {
        match (k.as_str(), v) {
            ("boundary" | "os_sandbox" | "kernel_view" | "uid" | "gid", _) => {}
            ("landlock_writable" | "landlock_readable" | "syscall_policy" | "reach", _) => {}
            ("no_new_privs", Value::Bool(true)) => always.push("no_new_privs"),
            ("inherited_fds_closed", Value::Bool(true)) => always.push("fds closed"),
            ("parent_death_signal", Value::Bool(true)) => always.push("parent-death signal"),
            ("landlock_abi", Value::Number(n)) => {
                let list = |key: &str, empty: &str| match i.get(key).and_then(Value::as_array) {
                    Some(a) if !a.is_empty() => phrase(&Value::Array(a.clone())),
                    _ => empty.to_string(),
                };
                enforced.push(format!(
                    "Landlock ABI {n} (writable: workspace, HOME, TMPDIR{}; readable: {})",
                    match list("landlock_writable", "") {
                        w if w.is_empty() => String::new(),
                        w => format!(", {w}"),
                    },
                    list("landlock_readable", "everything")
                ));
            }
            (_, Value::Bool(true)) => enforced.push(visible(&k.replace('_', " "))),
            (_, Value::Bool(false) | Value::Null) => {}
            (_, Value::String(t)) if t.is_empty() => {}
            (_, Value::Array(a)) if a.is_empty() => {}
            (_, v) => enforced.push(format!("{} {}", visible(&k.replace('_', " ")), phrase(v))),
        }
    }
    let who = match (
        i.get("uid").and_then(Value::as_u64),
        i.get("gid").and_then(Value::as_u64),
    ) {
        (Some(u), Some(g)) => format!("child uid {u} gid {g}; "),
        _ => String::new(),
    };
    let sandbox = match i.get("os_sandbox").and_then(Value::as_bool) {
        Some(true) => "an OS sandbox",
        _ => "NOT an OS sandbox",
    };
    rows.push(row(
        "isolation",
        format!(
            "{who}{sandbox}; enforced: {}",
            if enforced.is_empty() {
                "nothing beyond the always-on hardening".into()
            } else {
                enforced.join(", ")
            }
        ),
    ));
    reach_rows(i.get("reach"), rows);
    if !always.is_empty() {
        rows.push(row("always on", always.join(", ")));
    }
    if let Some(sp) = i.get("syscall_policy").and_then(Value::as_object) {
        let text = |k: &str| sp.get(k).and_then(Value::as_str).map(visible);
        let shown = match text("state").as_deref() {
            Some("enforced") => format!(
                "{} (seccomp, sha256 {})",
                text("name").unwrap_or_default(),
                text("sha256").unwrap_or_default()
            ),
            Some("waived") => "unconfined (waived by the approver)".to_string(),
            Some("not_applicable") => "none (the lease asks for no isolation option)".to_string(),
            other => other.unwrap_or("not reported").to_string(),
        };
        rows.push(row("syscalls", shown));
    }
    if let Some(b) = i.get("boundary").and_then(Value::as_str) {
        rows.push(row("boundary", visible(b)));
    }
}

/// The child's reach, one row per channel, the reachable ones first (each
/// group in the receipt's order): `REACHABLE daemon_socket PATH: how` or
/// `out of reach runner_signals: how`.
fn reach_rows(reach: Option<&Value>, rows: &mut Vec<Row>) {
    let Some(entries) = reach.and_then(Value::as_array).filter(|a| !a.is_empty()) else {
        return;
    };
    let open = |e: &Value| e.get("reachable").and_then(Value::as_bool) != Some(false);
    let ordered = entries
        .iter()
        .filter(|e| open(e))
        .chain(entries.iter().filter(|e| !open(e)));
    for (n, e) in ordered.enumerate() {
        let channel = s(e, "channel").map_or_else(|| "?".to_string(), visible);
        let path = s(e, "path")
            .map(|p| format!(" {}", visible(p)))
            .unwrap_or_default();
        let how = s(e, "how")
            .map(|h| format!(": {}", visible(h)))
            .unwrap_or_default();
        let state = if open(e) { "REACHABLE" } else { "out of reach" };
        let label = if n == 0 { "reach" } else { "" };
        rows.push(row(label, format!("{state} {channel}{path}{how}")));
    }
}

fn signing_row(p: &Value, rows: &mut Vec<Row>) {
    let Some(sg) = p.get("signing").filter(|v| v.is_object()) else {
        rows.push(row("signing key", "not reported in this receipt"));
        return;
    };
    let reach = match sg.get("key_out_of_child_reach").and_then(Value::as_bool) {
        Some(true) => "out of the child's reach",
        Some(false) => "WITHIN the child's reach (the child could have forged this receipt)",
        None => "reach not stated",
    };
    let why = s(sg, "why").map_or(String::new(), |w| format!(": {}", visible(w)));
    rows.push(row(
        "signing key",
        format!("{} {reach}{why}", s(sg, "keyid").map_or("?".into(), short)),
    ));
}

fn product_rows(p: &Value, rows: &mut Vec<Row>) {
    let products = p["products"].as_array().cloned().unwrap_or_default();
    if products.is_empty() {
        rows.push(row("products", "none recorded"));
    }
    for (n, prod) in products.iter().enumerate() {
        let path = s(prod, "path").map_or("?".into(), visible);
        let v = if prod.get("exists").and_then(Value::as_bool) == Some(true) {
            format!(
                "{path}  {} bytes  sha256 {}",
                phrase(&prod["size"]),
                s(prod, "sha256").map_or("?".into(), short)
            )
        } else {
            format!("{path}  MISSING")
        };
        rows.push(row(if n == 0 { "products" } else { "" }, v));
    }
}

/// Connections shown one per row; the receipt holds all it lists.
const CONNECTIONS_SHOWN: usize = 20;

/// `predicate.network`: the allowlist, then one row per connection attempt.
fn network_rows(p: &Value, rows: &mut Vec<Row>) {
    let Some(n) = p.get("network").filter(|n| n.is_object()) else {
        return;
    };
    let list = |v: &Value| -> String {
        let items: Vec<String> = v
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).map(visible).collect())
            .unwrap_or_default();
        if items.is_empty() {
            "none".into()
        } else {
            items.join(", ")
        }
    };
    let conns = n["connections"].as_array().cloned().unwrap_or_default();
    let denied = conns
        .iter()
        .filter(|c| s(c, "decision") == Some("denied"))
        .count();
    let omitted = n["omitted"].as_u64().unwrap_or(0);
    rows.push(row(
        "network",
        format!(
            "only {} via the egress proxy ({}); {} attempt(s) listed, {denied} denied, {omitted} more counted only; never used: {}",
            list(&n["allowed"]),
            s(n, "mechanism").map_or("?".into(), visible),
            conns.len(),
            list(&n["unused"])
        ),
    ));
    for c in conns.iter().take(CONNECTIONS_SHOWN) {
        let decision = s(c, "decision").unwrap_or("?").to_ascii_uppercase();
        let why = s(c, "reason").map_or(String::new(), |r| format!(" ({})", visible(r)));
        rows.push(row(
            "  connection",
            format!(
                "{decision}{why} {}:{} -> {}, sent {} B, received {} B, {} ms, at {}",
                s(c, "host").map_or("?".into(), visible),
                phrase(&c["port"]),
                s(c, "address").map_or("not dialled".into(), visible),
                phrase(&c["bytes_sent"]),
                phrase(&c["bytes_received"]),
                phrase(&c["duration_ms"]),
                s(c, "started_at").map_or("?".into(), visible)
            ),
        ));
    }
    if conns.len() > CONNECTIONS_SHOWN {
        rows.push(row(
            "  connection",
            format!(
                "... {} more listed in the receipt",
                conns.len() - CONNECTIONS_SHOWN
            ),
        ));
    }
}

fn other_rows(p: &Value, rows: &mut Vec<Row>) {
    let ran = p["command"].is_object();
    if let Some(r) = p.get("resources").filter(|r| r.is_object() && ran) {
        resource_rows(r, rows);
    }
    if let Some(m) = p.as_object() {
        for (k, v) in m {
            if !KNOWN.contains(&k.as_str()) && !v.is_null() {
                rows.push(row(&visible(k), phrase(v)));
            }
        }
    }
    if let Some(v) = s(p, "runner_version") {
        rows.push(row("runner", format!("governed-exec {}", visible(v))));
    }
}

/// A figure of `resources`, or why the receipt has none.
fn figure(r: &Value, key: &str, show: impl Fn(u64) -> String) -> String {
    match r[key].as_u64() {
        Some(n) => show(n),
        None => match s(r, &format!("{key}_why")) {
            Some(why) => format!("unknown ({})", visible(why)),
            None => "unknown".into(),
        },
    }
}

/// The resources table: what the whole run used (CONTRACT §9), then the
/// fit of each lease limit (used of limit, and the share).
fn resource_rows(r: &Value, rows: &mut Vec<Row>) {
    let size = |n: u64| format!("{} ({n} bytes)", units::format_size_approx(n));
    rows.push(row(
        "resources",
        format!(
            "measured by {}",
            s(r, "mechanism").map_or("rusage".into(), visible)
        ),
    ));
    rows.push(row(
        "cpu",
        format!(
            "{} ms user + {} ms system (peak RSS of one process {} KiB)",
            phrase(&r["cpu_user_ms"]),
            phrase(&r["cpu_system_ms"]),
            phrase(&r["peak_rss_kib"])
        ),
    ));
    if r.get("mechanism").is_none() {
        // A receipt from before v1.2: nothing more was measured.
        return;
    }
    rows.push(row("peak memory", figure(r, "peak_memory_bytes", size)));
    rows.push(row(
        "io",
        format!(
            "read {}, written {}",
            figure(r, "io_read_bytes", size),
            figure(r, "io_write_bytes", size)
        ),
    ));
    rows.push(row(
        "processes",
        figure(r, "peak_processes", |n| n.to_string()),
    ));
    rows.push(row("oom kills", figure(r, "oom_kills", |n| n.to_string())));
    let Some(fit) = r.get("fit").and_then(Value::as_object) else {
        return;
    };
    for (key, e) in fit {
        let used = e["used"].as_u64();
        let limit = e["limit"].as_u64();
        let show = |n: u64| {
            if key.ends_with("_ms") {
                units::format_ms(n)
            } else if key.ends_with("_bytes") {
                units::format_size_approx(n)
            } else {
                n.to_string()
            }
        };
        let text = match (used, limit) {
            (Some(u), Some(l)) if l > 0 => format!(
                "{} of {} ({:.0}%)",
                show(u),
                show(l),
                u as f64 * 100.0 / l as f64
            ),
            (Some(u), Some(l)) => format!("{} of {}", show(u), show(l)),
            (Some(u), None) => format!("{} (no limit)", show(u)),
            (None, Some(l)) => format!("not measured, of {}", show(l)),
            (None, None) => "not measured".into(),
        };
        let label = match key.as_str() {
            "wall_time_ms" => "fit wall".to_string(),
            "cpu_time_ms" => "fit cpu".to_string(),
            "memory_bytes" => "fit memory".to_string(),
            "processes" => "fit procs".to_string(),
            "output_bytes" => "fit output".to_string(),
            other => format!("fit {}", visible(other)),
        };
        rows.push(row(&label, text));
    }
}

/// The last `TAIL_LINES` lines of a stream's text projection, each made
/// visible-safe; tabs are expanded so the width count holds.
fn tail_lines(stream: &Value) -> Vec<String> {
    let text = s(stream, "text").unwrap_or("");
    let mut lines: Vec<&str> = text.split('\n').collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    let start = lines.len().saturating_sub(TAIL_LINES);
    lines[start..]
        .iter()
        .map(|l| visible(&l.replace('\t', "    ")))
        .collect()
}

fn stream_header(name: &str, stream: &Value, shown: usize) -> String {
    let bytes = stream.get("bytes").and_then(Value::as_u64).unwrap_or(0);
    let mut h = format!(
        "{name}: {bytes} bytes, sha256 {}",
        s(stream, "sha256").map_or("?".into(), short)
    );
    if stream.get("complete").and_then(Value::as_bool) == Some(false) {
        h.push_str(", INCOMPLETE (pipe held open past the drain bound)");
    }
    if shown > 0 {
        h.push_str(&format!(
            ", last {shown} line(s) of the safe text projection"
        ));
    }
    h
}

fn rows_of(p: &Value) -> Vec<Row> {
    let mut rows = Vec::new();
    rows.push(row(
        "receipt",
        format!(
            "{} attempt {}",
            s(p, "receipt_id").map_or("?".into(), visible),
            s(p, "attempt_id").map_or("none (nothing executed)".into(), visible)
        ),
    ));
    outcome_rows(p, &mut rows);
    identity_rows(p, &mut rows);
    cleanup_row(p, &mut rows);
    isolation_rows(p, &mut rows);
    network_rows(p, &mut rows);
    signing_row(p, &mut rows);
    product_rows(p, &mut rows);
    other_rows(p, &mut rows);
    rows
}

/// A word longer than `width` columns cut into pieces that fit, except an
/// absolute path, which stays whole so it can be copied.
fn pieces(word: &str, width: usize) -> Vec<String> {
    if columns(word) <= width || word.starts_with('/') || width == 0 {
        return vec![word.to_string()];
    }
    let mut out = vec![String::new()];
    let mut used = 0;
    for c in word.chars() {
        let w = char_columns(c);
        if used + w > width {
            out.push(String::new());
            used = 0;
        }
        used += w;
        if let Some(last) = out.last_mut() {
            last.push(c);
        }
    }
    out
}

/// Break `text` into lines of at most `width` columns at spaces; a word
/// longer than that is cut, except an absolute path, which stays whole.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split(' ').flat_map(|w| pieces(w, width)) {
        let len = columns(&cur);
        if len > 0 && len + 1 + columns(&word) > width {
            lines.push(std::mem::take(&mut cur));
        } else if len > 0 {
            cur.push(' ');
        }
        cur.push_str(&word);
    }
    lines.push(cur);
    lines
}

/// One line of a stream split into pieces of at most `width` columns, every
/// character kept: the end of a failing step's error message is often its
/// most useful part, so a tail line is wrapped, never cut.
fn hard_wrap(line: &str, width: usize) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut used = 0;
    for c in line.chars() {
        let w = char_columns(c);
        if used + w > width.max(2) && used > 0 {
            out.push(String::new());
            used = 0;
        }
        used += w;
        if let Some(last) = out.last_mut() {
            last.push(c);
        }
    }
    out
}

const UNCHECKED: &str =
    "shown as recorded: this view does not check the signature; `governed-exec verify` does";

/// `receipt show --format text`.
pub fn receipt_text(statement: &Value) -> String {
    let p = &statement["predicate"];
    let mut out = String::from("governed-exec receipt\n");
    for r in rows_of(p) {
        let mut first = true;
        // A label as long as the column still gets a space after it, and
        // the value wraps in what is left of the line.
        let w = LABEL.max(columns(&r.label) + 1);
        for line in wrap(&r.value, WIDTH.saturating_sub(w + 2)) {
            let label = if first { r.label.as_str() } else { "" };
            out.push_str(&format!("  {label:<w$}{line}\n"));
            first = false;
        }
    }
    for name in ["stdout", "stderr"] {
        let st = &p["streams"][name];
        let lines = tail_lines(st);
        out.push_str(&format!("  {}\n", stream_header(name, st, lines.len())));
        // A line longer than the view continues on `+` lines.
        for l in lines {
            for (i, piece) in hard_wrap(&l, WIDTH - 6).iter().enumerate() {
                let bar = if i == 0 { '|' } else { '+' };
                out.push_str(&format!("    {bar} {piece}\n"));
            }
        }
    }
    out.push_str(&format!("  ({UNCHECKED})\n"));
    out
}

/// `receipt show --format markdown`: a table block for a CI job summary
/// (`$GITHUB_STEP_SUMMARY`), then each stream's tail in a code fence no
/// child output can close.
pub fn receipt_markdown(statement: &Value) -> String {
    let p = &statement["predicate"];
    let class = s(&p["outcome"], "class").unwrap_or("?");
    let mut out = format!(
        "### governed-exec receipt: {}\n\n| field | value |\n|---|---|\n",
        markdown_cell(class)
    );
    for r in rows_of(p) {
        let label = if r.label.is_empty() {
            String::new()
        } else {
            markdown_cell(&r.label)
        };
        out.push_str(&format!("| {label} | {} |\n", markdown_cell(&r.value)));
    }
    for name in ["stdout", "stderr"] {
        let st = &p["streams"][name];
        let lines = tail_lines(st);
        out.push_str(&format!(
            "\n{}\n",
            markdown_cell(&stream_header(name, st, lines.len()))
        ));
        if !lines.is_empty() {
            let fence = markdown_fence(lines.iter().map(String::as_str));
            out.push_str(&format!("\n{fence}text\n"));
            for l in &lines {
                out.push_str(l);
                out.push('\n');
            }
            out.push_str(&format!("{fence}\n"));
        }
    }
    out.push_str(&format!("\n_{}_\n", markdown_cell(UNCHECKED)));
    out
}

/// One row of `verify --format markdown`.
pub struct CheckRow {
    pub check: String,
    pub met: Option<bool>,
    pub detail: String,
}

/// The verdict as one row per check: the receipt's authenticity, format,
/// goal binding and allowed outcome, then every criterion of the goal in
/// order, then the journal cross-check. Each unmet line of the verdict is
/// attached to the row it names (by its `check:` prefix); a line no row
/// claims gets a row of its own, so nothing unmet is ever dropped.
pub fn verify_rows(criteria: &[Criterion], unmet: &[String], journal: bool) -> Vec<CheckRow> {
    let mut claimed = vec![false; unmet.len()];
    let mut take = |prefix: &str| -> Vec<String> {
        let mut found = Vec::new();
        for (i, u) in unmet.iter().enumerate() {
            if !claimed[i] && u.starts_with(prefix) {
                claimed[i] = true;
                found.push(u[prefix.len()..].trim().to_string());
            }
        }
        found
    };
    let authentic = take("authentic:");
    let checked = authentic.is_empty();
    let mut rows = Vec::new();
    let mut push = |check: String, found: Vec<String>| {
        let (met, detail) = if !checked && !check.starts_with("authentic") {
            (
                None,
                "not checked: the receipt is not authentic".to_string(),
            )
        } else if found.is_empty() {
            (Some(true), String::new())
        } else {
            (Some(false), found.join("; "))
        };
        rows.push(CheckRow { check, met, detail });
    };
    push("authentic (runner signature)".into(), authentic);
    let format = take("format:");
    push("format".into(), format);
    let goal = take("goal:");
    push("goal id, revision, digest".into(), goal);
    let outcome = take("outcome:");
    push("outcome allowed".into(), outcome);
    for c in criteria {
        let (check, prefix) = criterion_row(c);
        let f = prefix.map_or_else(Vec::new, |p| take(&p));
        push(check, f);
    }
    if journal {
        let f = take("journal:");
        push("journal closes the attempt".into(), f);
    }
    let rest: Vec<String> = unmet
        .iter()
        .enumerate()
        .filter(|(i, _)| !claimed[*i])
        .map(|(_, u)| u.clone())
        .collect();
    for u in rest {
        let (check, detail) = u.split_once(':').unwrap_or(("other", u.as_str()));
        rows.push(CheckRow {
            check: check.to_string(),
            met: Some(false),
            detail: detail.trim().to_string(),
        });
    }
    rows
}

/// A criterion's row in [`verify_rows`]: what it checks, and the prefix of
/// the verdict's unmet lines that belong to it (none for `outcome`, whose
/// lines are the `outcome allowed` row's).
fn criterion_row(c: &Criterion) -> (String, Option<String>) {
    match c {
        Criterion::ExitCode { equals } => (
            format!("exit_code equals {equals}"),
            Some("exit_code:".into()),
        ),
        Criterion::NoLeftoverProcesses {} => (
            "no_leftover_processes".into(),
            Some("no_leftover_processes:".into()),
        ),
        Criterion::Outcome { allowed } => {
            let names: Vec<String> = allowed.iter().map(ToString::to_string).collect();
            (format!("outcome in [{}]", names.join(", ")), None)
        }
        Criterion::Resources {
            peak_memory_at_most,
            cpu_time_at_most,
            wall_time_at_most,
        } => {
            let bounds: Vec<String> = [
                ("peak memory", peak_memory_at_most),
                ("cpu time", cpu_time_at_most),
                ("wall time", wall_time_at_most),
            ]
            .iter()
            .filter_map(|(n, v)| v.as_ref().map(|v| format!("{n} ≤ {v}")))
            .collect();
            (
                format!("resources {}", bounds.join(", ")),
                Some("resources:".into()),
            )
        }
        Criterion::Network { max_denied, only } => {
            let mut what = vec!["network".to_string()];
            if let Some(n) = max_denied {
                what.push(format!("at most {n} denied"));
            }
            if let Some(o) = only {
                what.push(format!("only [{}]", o.join(", ")));
            }
            (what.join(" "), Some("network:".into()))
        }
        Criterion::File {
            path,
            exists,
            contains,
            sha256,
        } => {
            let mut what = vec![format!("file {path}")];
            if *exists == Some(false) {
                what.push("absent".into());
            } else {
                what.push("exists".into());
            }
            if let Some(c) = contains {
                what.push(format!("contains {c:?}"));
            }
            if let Some(h) = sha256 {
                what.push(format!("sha256 {}", h.get(..12).unwrap_or(h)));
            }
            (what.join(" "), Some(format!("file {path:?}:")))
        }
    }
}

/// `verify --format markdown`. The first line names the verdict
/// (`VERIFIED_DONE` or `NOT_VERIFIED`), as the text verdict's does.
pub fn verify_markdown(verdict: &str, goal_label: &str, rows: &[CheckRow]) -> String {
    let mut out = format!(
        "{verdict}\n\n### governed-exec verify: {verdict} ({})\n\n| check | met | detail |\n|---|---|---|\n",
        markdown_cell(goal_label)
    );
    for r in rows {
        let met = match r.met {
            Some(true) => "met",
            Some(false) => "**unmet**",
            None => "not checked",
        };
        out.push_str(&format!(
            "| {} | {met} | {} |\n",
            markdown_cell(&r.check),
            markdown_cell(&r.detail)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_lines_within_width_except_long_words() {
        let path = format!("/{}", "x".repeat(150));
        let text = format!("a b c {path} d e {}", "y".repeat(50));
        let lines = wrap(&text, 20);
        for l in &lines {
            assert!(columns(l) <= 20 || *l == path, "{l}");
        }
        assert!(lines.contains(&path));
        assert_eq!(lines.concat().matches('y').count(), 50);
        assert_eq!(wrap("", 10), vec![String::new()]);
    }

    #[test]
    fn hard_wrap_counts_columns_and_keeps_every_character() {
        let wide = "日".repeat(80);
        let pieces = hard_wrap(&wide, 20);
        assert_eq!(pieces.len(), 8, "{pieces:?}");
        assert!(pieces.iter().all(|p| columns(p) <= 20), "{pieces:?}");
        assert_eq!(pieces.concat(), wide);
        assert_eq!(hard_wrap("short", 20), vec!["short".to_string()]);
        assert_eq!(hard_wrap("", 20), vec![String::new()]);
    }

    #[test]
    fn unclaimed_unmet_lines_get_their_own_row() {
        let rows = verify_rows(
            &[Criterion::ExitCode { equals: 0 }],
            &[
                "exit_code: expected 0, receipt says 1".into(),
                "signing_key_in_child_reach: the key was readable".into(),
            ],
            false,
        );
        let names: Vec<&str> = rows.iter().map(|r| r.check.as_str()).collect();
        assert!(names.contains(&"signing_key_in_child_reach"), "{names:?}");
        let exit = rows
            .iter()
            .find(|r| r.check.starts_with("exit_code"))
            .expect("row");
        assert_eq!(exit.met, Some(false));
        assert!(exit.detail.contains("receipt says 1"));
    }

    #[test]
    fn an_inauthentic_receipt_leaves_criteria_unchecked() {
        let rows = verify_rows(
            &[Criterion::NoLeftoverProcesses {}],
            &["authentic: no signature verifies".into()],
            true,
        );
        assert_eq!(rows[0].met, Some(false));
        assert!(rows[1..].iter().all(|r| r.met.is_none()));
    }

    #[test]
    fn a_label_wider_than_the_column_still_fits_the_width() {
        let stmt = serde_json::json!({ "predicate": {
            "outcome": { "class": "exited", "exit_code": 0 },
            "process_limit": { "detail": "word ".repeat(60) },
        }});
        let text = receipt_text(&stmt);
        for l in text.lines() {
            assert!(columns(l) <= WIDTH, "{l:?}");
        }
        assert!(text.contains("process_limit"), "{text}");
    }
}
