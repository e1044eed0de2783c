//! The stored rows of a Goal's chain, checked: each column of a row is
//! something a holder of the database can edit on its own.

use std::path::PathBuf;

use crate::journal::{self, Entry, GENESIS};
use crate::LedgerError;

use super::PgTarget;

/// One row of `governed_exec_records`: its columns as stored, each of which
/// a holder of the database can edit on its own (fuzzed by
/// `testing::fuzzing::pg_rows`).
pub struct StoredRow {
    pub seq: i64,
    pub digest: String,
    pub line: String,
}

/// The rows of a Goal's chain, checked: the lines re-parsed as one chain,
/// each row's stored `seq` and `digest` equal to its line's, and the head
/// row naming the last record.
pub fn check_rows(
    target: &PgTarget,
    goal_id: &str,
    rows: &[StoredRow],
    next_seq: i64,
    last: &str,
) -> Result<Vec<Entry>, LedgerError> {
    let label = PathBuf::from(format!("{target} goal {goal_id:?}"));
    let mut bytes = Vec::new();
    for r in rows {
        bytes.extend_from_slice(r.line.as_bytes());
        bytes.push(b'\n');
    }
    let entries =
        journal::parse_chain(&label, &bytes).map_err(|e| LedgerError::Corrupt(e.to_string()))?;
    for (e, r) in entries.iter().zip(rows) {
        let (seq, digest) = (r.seq, &r.digest);
        if i64::try_from(e.record.seq).ok() != Some(seq) || &e.digest != digest {
            return Err(LedgerError::Corrupt(format!(
                "{}: record {seq}: stored digest or sequence does not match its line",
                label.display()
            )));
        }
    }
    let tail_ok = match entries.last() {
        Some(e) => e.digest == last && i64::try_from(e.record.seq + 1).ok() == Some(next_seq),
        None => next_seq == 0 && last == GENESIS,
    };
    if !tail_ok {
        return Err(LedgerError::Corrupt(format!(
            "{}: the head row does not match the last record (records removed?)",
            label.display()
        )));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Event;

    /// Three rows of a real chain (written by the local journal, which
    /// writes the same lines), with the head row that goes with them.
    fn chain() -> (Vec<StoredRow>, i64, String) {
        let d = tempfile::tempdir().unwrap();
        let mut j = journal::Journal::open(d.path(), "g").unwrap();
        for i in 0..3 {
            j.append(Event::Revocation {
                lease_id: format!("lease-{i}"),
                by: "t".into(),
            })
            .unwrap();
        }
        drop(j);
        let file = std::fs::read_dir(d.path().join("journal"))
            .unwrap()
            .flatten()
            .map(|f| f.path())
            .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .unwrap();
        let bytes = std::fs::read(&file).unwrap();
        let entries = journal::parse_chain(&file, &bytes).unwrap();
        let rows = entries
            .iter()
            .zip(String::from_utf8(bytes).unwrap().lines())
            .map(|(e, line)| StoredRow {
                seq: e.record.seq as i64,
                digest: e.digest.clone(),
                line: line.to_string(),
            })
            .collect();
        let last = entries.last().unwrap().digest.clone();
        (rows, 3, last)
    }

    fn check(rows: &[StoredRow], next_seq: i64, last: &str) -> Result<usize, LedgerError> {
        let t = PgTarget::parse("postgres://db/l").unwrap();
        check_rows(&t, "g", rows, next_seq, last).map(|e| e.len())
    }

    /// A holder of the database can edit any one column of a row, or the
    /// head row: each edit alone is refused as corrupt (a ledger that hid
    /// a spent use or a revocation would otherwise be read as true).
    #[test]
    fn check_rows_refuses_an_edit_to_any_single_column() {
        let (rows, next, last) = chain();
        assert_eq!(check(&rows, next, &last).unwrap(), 3);
        let edited = |f: &dyn Fn(&mut StoredRow)| {
            let (mut rows, next, last) = chain();
            f(&mut rows[1]);
            check(&rows, next, &last)
        };
        assert!(edited(&|r| r.seq = 7).is_err(), "seq alone");
        assert!(
            edited(&|r| r.digest = "00".repeat(32)).is_err(),
            "digest alone"
        );
        assert!(
            edited(&|r| r.line = r.line.replace("lease-1", "lease-9")).is_err(),
            "line alone"
        );
        assert!(
            check(&rows, next + 1, &last).is_err(),
            "head next_seq alone"
        );
        assert!(
            check(&rows, next, &rows[1].digest).is_err(),
            "head digest alone"
        );
        assert!(check(&rows[..2], next, &last).is_err(), "last row removed");
    }

    /// No rows go only with the genesis head.
    #[test]
    fn no_rows_go_only_with_the_genesis_head() {
        assert_eq!(check(&[], 0, GENESIS).unwrap(), 0);
        assert!(check(&[], 1, GENESIS).is_err(), "next_seq alone");
        assert!(check(&[], 0, &"ab".repeat(32)).is_err(), "digest alone");
    }
}
