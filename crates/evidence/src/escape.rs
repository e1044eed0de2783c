//! Escaping for every human view (receipt show, verify's verdict, approval
//! summaries): text that came from a child, a receipt file or a path is
//! untrusted, and must neither act on a terminal nor hide what it says.
//!
//! [`visible`] turns every control, bidi-formatting and invisible character
//! into a visible `\u{202e}`-style escape (the spelling of Rust's `{:?}`;
//! `\n`, `\t`, `\r` for the common three),
//! so an escape sequence cannot recolour or rewrite the screen, a bidi
//! override (Trojan Source) cannot reorder what is shown, and a zero-width
//! character cannot make two different strings look the same.
//! [`visible_lines`] does the same to multi-line text but keeps its line
//! breaks, and [`quoted`] renders one string (an argv element) quoted and
//! unambiguous. Leases, receipts and JSON output keep the exact bytes.
//! [`markdown_cell`] additionally escapes what would break out of a GitHub
//! table cell or be read as markup or HTML.

use std::fmt::Write as _;

/// Characters that reorder text (Unicode bidi controls).
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    )
}

/// Characters that render as nothing (or as blank) yet are not whitespace a
/// reader would notice: zero-width joiners and spaces, soft hyphen, word
/// joiner and invisible operators, line/paragraph separators, the BOM,
/// Hangul fillers, interlinear annotation marks and the tag block (used to
/// smuggle invisible ASCII).
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{17B4}'
            | '\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200D}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{2060}'..='\u{2064}'
            | '\u{206A}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{E0000}'..='\u{E007F}'
    )
}

/// Whether `c` would act on a terminal or hide itself when printed as is.
pub fn is_unsafe(c: char) -> bool {
    c.is_control() || is_bidi_control(c) || is_invisible(c)
}

/// `s` with every unsafe character replaced by a visible escape: the result
/// is one line of printable text that reads the same in every viewer.
pub fn visible(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if is_unsafe(c) => push_escape(&mut out, c),
            c => out.push(c),
        }
    }
    out
}

fn push_escape(out: &mut String, c: char) {
    let _ = write!(out, "\\u{{{:x}}}", c as u32);
}

/// [`visible`] for multi-line text (an approval summary): each line
/// escaped, the line breaks kept.
pub fn visible_lines(s: &str) -> String {
    s.split('\n').map(visible).collect::<Vec<_>>().join("\n")
}

/// One string quoted so that the rendering maps back to exactly that
/// string: `"` and `\\` are backslash-escaped too, on top of [`visible`].
pub fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if is_unsafe(c) => push_escape(&mut out, c),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `s` made safe for one cell of a GitHub-flavoured markdown table: no
/// control or invisible character ([`visible`]), no `|` that ends the cell,
/// no backtick, emphasis, link or heading markup, and no HTML. Every
/// markdown view (a receipt's, verify's, `approve --check`'s) puts each
/// piece of text it did not write itself through this one function.
pub fn markdown_cell(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in visible(s).chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '~' | '#' | '!' | '$' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// [`visible`], and every character outside printable ASCII escaped too
/// (`\u{430}`): for a value a reviewer compares with another, where a
/// Cyrillic `а` in place of a Latin `a` must not pass for no change. Give it
/// text whose backslashes are already escaped ([`quoted`], JSON), so a
/// literal `\u{430}` in the value cannot pass for the escape.
pub fn ascii(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in visible(s).chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            push_escape(&mut out, c);
        }
    }
    out
}

/// A code fence that no line of `lines` can close: one backtick longer than
/// the longest run of backticks in them (at least three).
pub(crate) fn markdown_fence<'a>(lines: impl IntoIterator<Item = &'a str>) -> String {
    let longest = lines
        .into_iter()
        .flat_map(|l| l.split(|c| c != '`'))
        .map(str::len)
        .max()
        .unwrap_or(0);
    "`".repeat((longest + 1).max(3))
}

/// Terminal columns one character takes: 2 for East Asian wide and
/// fullwidth characters and most emoji, 0 for combining marks, else 1. An
/// approximation of `wcwidth` good enough to keep views inside a width.
pub(crate) fn char_columns(c: char) -> usize {
    match c as u32 {
        0x0300..=0x036F | 0x200B..=0x200F | 0xFE00..=0xFE0F => 0,
        0x1100..=0x115F
        | 0x2E80..=0x303E
        | 0x3041..=0x33FF
        | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xA000..=0xA4CF
        | 0xAC00..=0xD7A3
        | 0xF900..=0xFAFF
        | 0xFE30..=0xFE4F
        | 0xFF00..=0xFF60
        | 0xFFE0..=0xFFE6
        | 0x1F300..=0x1F64F
        | 0x1F900..=0x1F9FF
        | 0x20000..=0x3FFFD => 2,
        _ => 1,
    }
}

/// Terminal columns of a string ([`char_columns`] summed).
pub fn columns(s: &str) -> usize {
    s.chars().map(char_columns).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_bidi_and_invisibles_become_visible_escapes() {
        let s = "a\u{1b}[31mb\u{202E}c\u{200B}d\u{2066}e\u{E0041}f\u{7f}\n\t\r";
        let v = visible(s);
        assert_eq!(
            v,
            "a\\u{1b}[31mb\\u{202e}c\\u{200b}d\\u{2066}e\\u{e0041}f\\u{7f}\\n\\t\\r"
        );
        assert!(v.chars().all(|c| !is_unsafe(c)));
        assert_eq!(visible("plain text, ünïcödé ✓"), "plain text, ünïcödé ✓");
    }

    #[test]
    fn lines_keep_their_breaks_and_quoted_is_unambiguous() {
        assert_eq!(visible_lines("a\u{202e}\nb"), "a\\u{202e}\nb");
        assert_eq!(quoted("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(quoted("x\u{202e}y\n"), "\"x\\u{202e}y\\n\"");
        assert_ne!(quoted("\\u{202e}"), quoted("\u{202e}"));
    }

    #[test]
    fn markdown_cell_cannot_break_the_table_or_inject_html() {
        let m = markdown_cell("a|b `c` <script>&x *y* [l](u)\n| new row |");
        assert!(!m.contains("<script>"));
        assert!(!m.contains('\n'));
        // Every `|` and backtick is escaped.
        let bytes = m.as_bytes();
        for (i, b) in bytes.iter().enumerate() {
            if *b == b'|' || *b == b'`' {
                assert_eq!(bytes[i - 1], b'\\', "{m}");
            }
        }
    }

    #[test]
    fn ascii_shows_a_homoglyph_as_what_it_is() {
        assert_eq!(ascii("\"p\u{430}ssword\""), "\"p\\u{430}ssword\"");
        assert_eq!(ascii("a\u{202e}b"), "a\\u{202e}b");
        assert_ne!(ascii(&quoted("\\u{430}")), ascii(&quoted("\u{430}")));
        assert_eq!(ascii("plain | text"), "plain | text");
    }

    #[test]
    fn wide_characters_take_two_columns() {
        assert_eq!(columns("abc"), 3);
        assert_eq!(columns("日本語"), 6);
        assert_eq!(columns("e\u{301}"), 1);
    }

    #[test]
    fn fence_is_longer_than_any_backtick_run() {
        assert_eq!(markdown_fence(["no ticks"]), "```");
        assert_eq!(markdown_fence(["a ```` b", "``"]), "`````");
    }
}
