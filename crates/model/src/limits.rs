//! The profile tiers and the parsing of durations and sizes.
//!
//! A request can only name a tier; the approver may override any concrete
//! value, and the lease records the final numbers, so `run` never consults
//! this table for a lease (a later change of defaults cannot widen an
//! approved lease).

use crate::units::{GIB, KIB, MIB};
use crate::{Limits, MaxProcesses, Profile, DEFAULT_CANCEL_GRACE_MS};

pub use crate::units::{format_ms, format_size, parse_duration, parse_size};

/// Default concrete limits of each tier (documented in the table of docs/GUIDE.md, Profiles).
pub fn tier(profile: Profile) -> Limits {
    match profile {
        Profile::Short => Limits {
            wall_time_ms: 60_000,
            kill_grace_ms: 2_000,
            cpu_time_s: 60,
            memory_bytes: 2 * GIB,
            max_processes: MaxProcesses::Limit(256),
            max_open_files: 1024,
            max_file_size_bytes: 256 * MIB,
            keep_output_bytes: 16 * KIB,
            output_cap_bytes: 16 * MIB,
            cancel_grace_ms: DEFAULT_CANCEL_GRACE_MS,
        },
        Profile::Standard => Limits {
            wall_time_ms: 10 * 60_000,
            kill_grace_ms: 5_000,
            cpu_time_s: 20 * 60,
            memory_bytes: 8 * GIB,
            max_processes: MaxProcesses::Limit(1024),
            max_open_files: 4096,
            max_file_size_bytes: 4 * GIB,
            keep_output_bytes: 64 * KIB,
            output_cap_bytes: 256 * MIB,
            cancel_grace_ms: DEFAULT_CANCEL_GRACE_MS,
        },
        Profile::Long => Limits {
            wall_time_ms: 2 * 3_600_000,
            kill_grace_ms: 10_000,
            cpu_time_s: 4 * 3_600,
            memory_bytes: 16 * GIB,
            max_processes: MaxProcesses::Limit(4096),
            max_open_files: 16384,
            max_file_size_bytes: 16 * GIB,
            keep_output_bytes: 256 * KIB,
            output_cap_bytes: GIB,
            cancel_grace_ms: DEFAULT_CANCEL_GRACE_MS,
        },
    }
}

/// `--max-processes`: a number greater than zero, or `unlimited` (the
/// approver's explicit waiver of the process limit).
pub fn parse_max_processes(s: &str) -> Result<MaxProcesses, MaxProcessesError> {
    if s == "unlimited" {
        return Ok(MaxProcesses::UNLIMITED);
    }
    match s.parse::<u64>() {
        Ok(n) if n > 0 => Ok(MaxProcesses::Limit(n)),
        _ => Err(MaxProcessesError(s.to_string())),
    }
}

/// A `--max-processes` that is neither a positive number nor `unlimited`.
#[derive(Debug, thiserror::Error)]
#[error("invalid process limit {0:?}: expected a number greater than zero or `unlimited`")]
pub struct MaxProcessesError(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("10").ok(), Some(10));
        assert_eq!(parse_size("4KiB").ok(), Some(4096));
        assert_eq!(parse_size("2 MiB").ok(), Some(2 * MIB));
        assert!(parse_size("4kb").is_err());
        assert!(parse_size("-1").is_err());
    }

    /// The tiers are the user's guide's table, cell for cell: a default that
    /// changes here changes what people were told, so both change together.
    #[test]
    fn the_tiers_are_the_guide_table() {
        let guide =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/GUIDE.md"))
                .expect("docs/GUIDE.md");
        // The table under its header, up to the first line that is no row.
        let table: Vec<&str> = guide
            .lines()
            .skip_while(|l| !l.starts_with("| limit (flag) | `short` | `standard` | `long` |"))
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert!(table.len() > 2, "the guide's tier table is gone");
        // The row whose first cell names `flag`: its short, standard and
        // long cells.
        let row = |flag: &str| -> [String; 3] {
            let line = table
                .iter()
                .find(|l| l.contains(&format!("(`{flag}`)")))
                .unwrap_or_else(|| panic!("no guide row for {flag}"));
            let cells: Vec<String> = line
                .split('|')
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
                .collect();
            assert_eq!(cells.len(), 4, "{line}");
            [cells[1].clone(), cells[2].clone(), cells[3].clone()]
        };
        let ms = |s: &str| parse_duration(s).expect(s).as_millis() as u64;
        let size = |s: &str| parse_size(s).expect(s);
        let num = |s: &str| s.parse::<u64>().expect(s);
        for (i, p) in [Profile::Short, Profile::Standard, Profile::Long]
            .into_iter()
            .enumerate()
        {
            let t = tier(p);
            let cell = |flag: &str| row(flag)[i].clone();
            assert_eq!(t.wall_time_ms, ms(&cell("--wall-time")), "{p} wall time");
            assert_eq!(t.kill_grace_ms, ms(&cell("--kill-grace")), "{p} kill grace");
            assert_eq!(
                t.cancel_grace_ms,
                ms(&cell("--cancel-grace")),
                "{p} cancel grace"
            );
            assert_eq!(t.cpu_time_s * 1000, ms(&cell("--cpu-time")), "{p} cpu");
            assert_eq!(t.memory_bytes, size(&cell("--memory")), "{p} memory");
            assert_eq!(
                t.max_processes,
                MaxProcesses::Limit(num(&cell("--max-processes"))),
                "{p} processes"
            );
            assert_eq!(
                t.max_open_files,
                num(&cell("--max-open-files")),
                "{p} open files"
            );
            assert_eq!(
                t.max_file_size_bytes,
                size(&cell("--max-file-size")),
                "{p} file size"
            );
            assert_eq!(
                t.keep_output_bytes,
                size(&cell("--keep-output")),
                "{p} kept output"
            );
            assert_eq!(
                t.output_cap_bytes,
                size(&cell("--output-cap")),
                "{p} output cap"
            );
        }
    }

    /// `--max-processes` takes 1 and up (0 would let nothing run) or the
    /// explicit waiver; anything else is refused, naming what was given.
    #[test]
    fn max_processes_edges() {
        assert_eq!(parse_max_processes("1").ok(), Some(MaxProcesses::Limit(1)));
        assert_eq!(
            parse_max_processes(&u64::MAX.to_string()).ok(),
            Some(MaxProcesses::Limit(u64::MAX))
        );
        for bad in [
            "",
            "-1",
            "18446744073709551616",
            " 64",
            "64 ",
            "1e3",
            "none",
        ] {
            let e = parse_max_processes(bad).err().map(|e| e.to_string());
            assert_eq!(
                e,
                Some(format!(
                    "invalid process limit {bad:?}: expected a number greater than zero or `unlimited`"
                ))
            );
        }
    }

    #[test]
    fn max_processes() {
        assert_eq!(
            parse_max_processes("64").ok(),
            Some(MaxProcesses::Limit(64))
        );
        assert_eq!(
            parse_max_processes("unlimited").ok(),
            Some(MaxProcesses::UNLIMITED)
        );
        assert!(parse_max_processes("0").is_err());
        assert!(parse_max_processes("Unlimited").is_err());
        // A number stays a plain JSON number (old leases keep their bytes).
        assert_eq!(
            serde_json::to_string(&MaxProcesses::Limit(64))
                .ok()
                .as_deref(),
            Some("64")
        );
        assert_eq!(
            serde_json::to_string(&MaxProcesses::UNLIMITED)
                .ok()
                .as_deref(),
            Some("\"unlimited\"")
        );
        let back: Result<MaxProcesses, _> = serde_json::from_str("\"unlimited\"");
        assert_eq!(back.ok(), Some(MaxProcesses::UNLIMITED));
        let bad: Result<MaxProcesses, _> = serde_json::from_str("\"lots\"");
        assert!(bad.is_err());
    }
}
