//! The approvals file (CONTRACT §10): a reviewed TOML file with one entry
//! per approved command, the same names as `approve`'s flags with `_` for
//! `-`. A closed shape: an unknown key, a wrong type or a malformed file is
//! an error that names the key and the line. Parsing only; what an entry
//! means is `cli::approvals`' business (it hands each entry to the very
//! code `approve -- CMD` runs).

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;

use crate::{Profile, Syscalls};

/// The whole file: optional defaults, then `[[command]]` entries.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsFile {
    /// The Goal file every entry is bound to (relative to this file's
    /// directory); `approve --goal` when absent.
    pub goal: Option<String>,
    /// The workspace (relative to this file's directory); `approve
    /// --workspace` when absent.
    pub workspace: Option<String>,
    /// Default profile tier (`short`, `standard`, `long`).
    pub profile: Option<Profile>,
    /// Default lease lifetime (humantime: `15m`, `30d`); `15m` when absent.
    pub ttl: Option<String>,
    /// Default number of uses; 1 when absent.
    pub uses: Option<u64>,
    /// Default binding: `true` binds by content (`approve --portable`).
    pub portable: Option<bool>,
    /// Default ledger: a directory (relative to this file's directory) or
    /// `postgres://HOST[:PORT]/DB`.
    pub ledger: Option<String>,
    /// One table per approved command.
    #[serde(default)]
    pub command: Vec<Entry>,
}

/// A size in bytes: a number, or text with a `KiB`/`MiB`/`GiB` suffix; for
/// `max_processes` also `"unlimited"`; for `as_user` `UID` or `"UID:GID"`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum NumberOrText {
    Number(u64),
    Text(String),
}

impl NumberOrText {
    pub fn text(&self) -> String {
        match self {
            NumberOrText::Number(n) => n.to_string(),
            NumberOrText::Text(t) => t.clone(),
        }
    }
}

/// One approved command: `approve`'s flags for one lease.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Unique within the file; how the summary and `--check` name the entry.
    pub name: Option<String>,
    /// `[executable, arg, …]`, literal words as `approve -- EXECUTABLE ARG…`
    /// takes them (no shell). An executable without `/` is looked up in the
    /// child's clean PATH; with `/`, relative to `cwd`.
    pub run: Vec<String>,
    /// Relative to the workspace, as `approve --cwd`.
    pub cwd: Option<String>,
    pub profile: Option<Profile>,
    pub ttl: Option<String>,
    pub uses: Option<u64>,
    pub portable: Option<bool>,
    pub ledger: Option<String>,
    /// Overrides the file's `goal` for this entry.
    pub goal: Option<String>,
    /// Overrides the file's `workspace` for this entry.
    pub workspace: Option<String>,
    pub wall_time: Option<String>,
    pub kill_grace: Option<String>,
    pub cancel_grace: Option<String>,
    pub cpu_time: Option<String>,
    pub memory: Option<NumberOrText>,
    pub max_processes: Option<NumberOrText>,
    pub max_open_files: Option<u64>,
    pub max_file_size: Option<NumberOrText>,
    pub keep_output: Option<NumberOrText>,
    pub output_cap: Option<NumberOrText>,
    /// Fixed child environment values (`approve --env KEY=VALUE`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub as_user: Option<NumberOrText>,
    /// Absolute, or relative to this file's directory.
    #[serde(default)]
    pub fs_write: Vec<String>,
    #[serde(default)]
    pub fs_write_scope: bool,
    /// Absolute, or relative to this file's directory.
    #[serde(default)]
    pub fs_read: Vec<String>,
    #[serde(default)]
    pub no_network: bool,
    #[serde(default)]
    pub pid_namespace: bool,
    /// `approve --allow-net HOST[:PORT]` (CONTRACT §8).
    pub allow_net: Option<Vec<String>>,
    /// `--daemon-socket`: more daemon sockets in the child's reach.
    #[serde(default)]
    pub daemon_socket: Option<Vec<String>>,
    /// `approve --syscalls`: `"default"` or `"unconfined"` (only with an
    /// isolation option; absent: the policy, where one applies).
    pub syscalls: Option<Syscalls>,
}

/// A parsed file, with the line of each `[[command]]` entry.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub file: ApprovalsFile,
    /// 1-based line of each entry, in file order.
    pub lines: Vec<usize>,
}

/// A parse error: a one-line message and the line it points at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

/// The 1-based line holding byte `offset` of `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Where each `[[command]]` table starts, found by a second, lenient read
/// of the same text (so the published shape stays plain serde types).
#[derive(Deserialize)]
struct Spans {
    #[serde(default)]
    command: Vec<toml::Spanned<toml::Table>>,
}

/// Parse the text of an approvals file.
pub fn parse(text: &str) -> Result<Parsed, ParseError> {
    let err = |span: Option<Range<usize>>, message: String| {
        let line = span.map_or(1, |s| line_of(text, s.start));
        ParseError { line, message }
    };
    let file: ApprovalsFile =
        toml::from_str(text).map_err(|e| err(e.span(), one_line(e.message())))?;
    let spans: Spans = toml::from_str(text).map_err(|e| err(e.span(), one_line(e.message())))?;
    let lines = spans
        .command
        .iter()
        .map(|s| header_line(text, s.span().start))
        .collect();
    Ok(Parsed { file, lines })
}

/// The line of the `[[command]]` header of the table whose body starts at
/// `offset` (the span may start at the first key), else that line.
fn header_line(text: &str, offset: usize) -> usize {
    let line = line_of(text, offset);
    let lines: Vec<&str> = text.lines().collect();
    (1..=line)
        .rev()
        .find(|&n| {
            lines
                .get(n - 1)
                .is_some_and(|l| l.trim_start().starts_with("[[command]]"))
        })
        .unwrap_or(line)
}

/// The first line at or after `from` (1-based) whose key is `key`, within
/// the entry that starts there; `from` when there is none.
pub fn key_line(text: &str, from: usize, key: &str) -> usize {
    text.lines()
        .enumerate()
        .skip(from)
        .take_while(|(_, l)| !l.trim_start().starts_with('['))
        .find(|(_, l)| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map_or(from, |(i, _)| i + 1)
}

/// The `[[command]]` entry holding `line` (1-based), read from the text
/// alone (for errors in a file that did not parse): its position, header
/// line and name when it has a plain `name = "…"` line.
pub fn entry_at(text: &str, line: usize) -> Option<(usize, usize, Option<String>)> {
    let lines: Vec<&str> = text.lines().collect();
    let is_header = |l: &str| l.trim_start().starts_with("[[command]]");
    let headers: Vec<usize> = (1..=line.min(lines.len()))
        .filter(|&n| lines.get(n - 1).is_some_and(|l| is_header(l)))
        .collect();
    let header = *headers.last()?;
    let name = lines
        .iter()
        .skip(header)
        .take_while(|l| !l.trim_start().starts_with('['))
        .find_map(|l| {
            let t: toml::Table = toml::from_str(l).ok()?;
            t.get("name")?.as_str().map(String::from)
        });
    Some((headers.len() - 1, header, name))
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_carry_their_header_lines() {
        let text = "goal = \"g.json\"\n\n[[command]]\nname = \"a\"\nrun = [\"true\"]\n\n# c\n[[command]]\nname = \"b\"\nrun = [\"false\"]\n";
        let p = parse(text).unwrap();
        assert_eq!(p.lines, vec![3, 8]);
        assert_eq!(p.file.command[1].name.as_deref(), Some("b"));
        assert_eq!(key_line(text, 8, "run"), 10);
    }

    #[test]
    fn an_unknown_key_names_itself_and_its_line() {
        let text = "[[command]]\nname = \"a\"\nrun = [\"true\"]\nwall_tme = \"1s\"\n";
        let e = parse(text).unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("wall_tme"), "{e}");
        assert_eq!(entry_at(text, e.line), Some((0, 1, Some("a".into()))));
    }

    #[test]
    fn a_malformed_file_names_its_line() {
        let e = parse("[[command]]\nname = \"a\"\nrun = [\"true\"\n").unwrap_err();
        assert!(e.line >= 3, "{e}");
    }

    #[test]
    fn sizes_take_numbers_or_suffixed_text() {
        let p =
            parse("[[command]]\nrun = [\"x\"]\nmemory = 1024\noutput_cap = \"1MiB\"\n").unwrap();
        let c = &p.file.command[0];
        assert_eq!(c.memory, Some(NumberOrText::Number(1024)));
        assert_eq!(c.output_cap, Some(NumberOrText::Text("1MiB".into())));
    }
}
