//! The folders' layer order, checked: every `crate::…` path a folder names
//! points to its own folder or one below it (ARCHITECTURE.md, "The tree is
//! the pipeline"). `testing` stands beside the layers: any of them may call
//! the crash-injection points of `testing::fault`, which import nothing
//! from the crate, and their unit tests may use the fuzz harnesses of
//! `testing::fuzzing`; the code itself never does.
//!
//! The check reads `src/` as text: comments, strings and character literals
//! are blanked first, so only code is read; a `#[cfg(test)]` item (up to
//! its closing brace) is test code.

use std::path::{Path, PathBuf};

/// Top to bottom: a folder may import only itself and the folders after it.
pub const LAYERS: [&str; 8] = [
    "cli", "run", "process", "gate", "evidence", "ledger", "model", "os",
];

/// `text` with the contents of comments, string literals (raw ones too) and
/// character literals replaced by spaces; newlines and every byte offset are
/// kept, so a position in the result is the same position in `text`.
fn blank(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let wipe = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = memchr::memchr(b'\n', &b[i..]).map_or(b.len(), |n| i + n);
                wipe(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = memchr::memmem::find(&b[i + 2..], b"*/").map_or(b.len(), |n| i + n + 4);
                wipe(&mut out, i, end);
                i = end;
            }
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                let body = i + 2 + hashes;
                let end = memchr::memmem::find(&b[body..], &close)
                    .map_or(b.len(), |n| body + n + close.len());
                wipe(&mut out, body, end - close.len());
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                wipe(&mut out, i + 1, j);
                i = j + 1;
            }
            b'\'' => {
                // A character literal ('x', '\n', '\u{..}'), or a lifetime.
                if b.get(i + 1) == Some(&b'\\') {
                    let end = memchr::memchr(b'\'', &b[i + 2..]).map_or(b.len(), |n| i + 2 + n);
                    wipe(&mut out, i + 1, end);
                    i = end + 1;
                } else if let Some(c) = text[i + 1..].chars().next() {
                    let after = i + 1 + c.len_utf8();
                    if b.get(after) == Some(&b'\'') {
                        wipe(&mut out, i + 1, after);
                        i = after + 1;
                    } else {
                        i += 1;
                    }
                } else {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The byte ranges of `#[cfg(test)]` items in blanked code: from the
/// attribute to the item's closing brace (or its `;`).
fn test_ranges(code: &str) -> Vec<(usize, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    for (at, _) in code.match_indices("#[cfg(test)]") {
        let from = at + "#[cfg(test)]".len();
        let Some(open) = code[from..].find(['{', ';']).map(|n| from + n) else {
            continue;
        };
        if b[open] == b';' {
            out.push((at, open + 1));
            continue;
        }
        let mut depth = 0usize;
        let mut end = b.len();
        for (k, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((at, end));
    }
    out
}

/// The crate paths `code` names: (byte offset, the path's first two
/// segments, e.g. `ledger::journal`); a `crate::{…}` group gives each of
/// its members, nested groups expanded.
fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let two = |path: &str| -> String {
        path.split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .take(2)
            .collect::<Vec<_>>()
            .join("::")
    };
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let prev = code[..at].chars().next_back();
        if prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `governed_exec_crate::`, not this crate
        }
        let rest = &code[at + "crate::".len()..];
        if rest.starts_with('{') {
            let Some(close) = matching_brace(rest) else {
                continue;
            };
            for member in expand("", &rest[1..close]) {
                out.push((at, two(&member)));
            }
        } else {
            let path: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push((at, two(&path)));
        }
    }
    out
}

/// The offset of the `}` closing the `{` that `s` starts with.
fn matching_brace(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (k, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

/// The members of a `use` group's body (`a::b, c::{d, e}`), each as a full
/// path after `prefix`.
fn expand(prefix: &str, body: &str) -> Vec<String> {
    let mut members = Vec::new();
    let (mut depth, mut from) = (0usize, 0usize);
    for (k, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                members.push(&body[from..k]);
                from = k + 1;
            }
            _ => {}
        }
    }
    members.push(&body[from..]);
    let mut out = Vec::new();
    for m in members.into_iter().map(str::trim).filter(|m| !m.is_empty()) {
        match m.find('{') {
            Some(open) => {
                let head = m[..open].trim_end_matches("::").trim();
                let inner =
                    matching_brace(&m[open..]).map_or(&m[open + 1..], |c| &m[open + 1..open + c]);
                out.extend(expand(&format!("{prefix}{head}::"), inner));
            }
            None => out.push(format!("{prefix}{m}")),
        }
    }
    out
}

/// Every import of `src/` that breaks the order, as `file:line: what`.
pub fn upward_imports(src: &Path) -> Vec<String> {
    let rank = |name: &str| LAYERS.iter().position(|l| *l == name);
    let mut out = Vec::new();
    for (folder_rank, folder) in LAYERS.iter().enumerate() {
        for file in rust_files(&src.join(folder)) {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let code = blank(&text);
            let tests = test_ranges(&code);
            let in_test = |at: usize| tests.iter().any(|&(a, b)| a <= at && at < b);
            let line = |at: usize| code[..at].matches('\n').count() + 1;
            let shown = file
                .strip_prefix(src)
                .unwrap_or(&file)
                .display()
                .to_string();
            for (at, path) in crate_paths(&code) {
                let top = path.split("::").next().unwrap_or("");
                let fine = match rank(top) {
                    Some(r) => r >= folder_rank,
                    None if top == "testing" => {
                        path == "testing::fault" || (path == "testing::fuzzing" && in_test(at))
                    }
                    // A crate-root item (none today) or a macro path.
                    None => true,
                };
                if !fine {
                    out.push(format!(
                        "src/{shown}:{}: {folder} imports crate::{path}",
                        line(at)
                    ));
                }
            }
            // In a folder's mod.rs, `super::` is the crate root: a path
            // this check would not see.
            if file.file_name().is_some_and(|n| n == "mod.rs") {
                for (at, _) in code.match_indices("super::") {
                    if !in_test(at) {
                        out.push(format!(
                            "src/{shown}:{}: write crate:: instead of super:: in a mod.rs",
                            line(at)
                        ));
                    }
                }
            }
        }
    }
    // The crash-injection points are a leaf: every layer may call them.
    let fault = src.join("testing/fault.rs");
    let code = blank(&std::fs::read_to_string(&fault).unwrap_or_default());
    for (at, path) in crate_paths(&code) {
        let line = code[..at].matches('\n').count() + 1;
        out.push(format!(
            "src/testing/fault.rs:{line}: imports crate::{path}"
        ));
    }
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
    }

    /// The rule of the tree: imports point down the layers, never up.
    #[test]
    fn every_folder_imports_only_itself_and_the_layers_below() {
        for folder in LAYERS {
            assert!(src().join(folder).is_dir(), "src/{folder} is gone");
        }
        let up = upward_imports(&src());
        assert!(
            up.is_empty(),
            "imports against the layer order {}:\n{}",
            LAYERS.join(" → "),
            up.join("\n")
        );
    }

    /// The check sees what it must: a `use`, a path in code, a group's
    /// members; and not what it must not: comments and strings.
    #[test]
    fn the_scan_reads_code_not_comments_or_strings() {
        let code = blank(
            "use crate::ledger::journal;\n\
             // crate::cli in a comment\n\
             let s = \"crate::cli in a string\"; let r = r#\"crate::run\"#; let c = '{';\n\
             use crate::{model::units, gate::{reach, lease}};\n\
             fn f<'a>(x: &'a str) { crate::os::sys::f(x) }\n\
             #[cfg(test)]\nmod tests { use crate::testing::fuzzing::lease; fn g() { if true {} } }\n\
             use crate::testing::fuzzing::x;\n",
        );
        let paths: Vec<String> = crate_paths(&code).into_iter().map(|(_, p)| p).collect();
        assert_eq!(
            paths,
            [
                "ledger::journal",
                "model::units",
                "gate::reach",
                "gate::lease",
                "os::sys",
                "testing::fuzzing",
                "testing::fuzzing"
            ]
        );
        let tests = test_ranges(&code);
        assert_eq!(tests.len(), 1);
        let at: Vec<usize> = crate_paths(&code)
            .into_iter()
            .filter(|(_, p)| p == "testing::fuzzing")
            .map(|(a, _)| a)
            .collect();
        assert!(tests[0].0 < at[0] && at[0] < tests[0].1);
        assert!(at[1] >= tests[0].1, "the test module ends at its brace");
    }
}
