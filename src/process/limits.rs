//! The profile tiers and the parsing of durations and sizes.
//!
//! A request can only name a tier; the approver may override any concrete
//! value, and the lease records the final numbers, so `run` never consults
//! this table for a lease (a later change of defaults cannot widen an
//! approved lease).

use std::time::Duration;

use crate::model::{Limits, MaxProcesses, Profile, DEFAULT_CANCEL_GRACE_MS};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// Default concrete limits of each tier (documented in the README table).
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

/// `1500ms`, `30s`, `10m`, `2h` (humantime).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

/// `--max-processes`: a number greater than zero, or `unlimited` (the
/// approver's explicit waiver of the process limit).
pub fn parse_max_processes(s: &str) -> Result<MaxProcesses, String> {
    if s == "unlimited" {
        return Ok(MaxProcesses::UNLIMITED);
    }
    match s.parse::<u64>() {
        Ok(n) if n > 0 => Ok(MaxProcesses::Limit(n)),
        _ => Err(format!(
            "invalid process limit {s:?}: expected a number greater than zero or `unlimited`"
        )),
    }
}

/// Bytes with an optional `KiB`/`MiB`/`GiB` suffix.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = [("GiB", GIB), ("MiB", MIB), ("KiB", KIB), ("B", 1)]
        .iter()
        .find_map(|(suf, m)| t.strip_suffix(suf).map(|n| (n.trim(), *m)))
        .unwrap_or((t, 1));
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| {
            format!("invalid size {s:?}: expected bytes with an optional KiB/MiB/GiB suffix")
        })
}

pub fn format_size(n: u64) -> String {
    match n {
        n if n >= GIB && n % GIB == 0 => format!("{} GiB", n / GIB),
        n if n >= MIB && n % MIB == 0 => format!("{} MiB", n / MIB),
        n if n >= KIB && n % KIB == 0 => format!("{} KiB", n / KIB),
        n => format!("{n} bytes"),
    }
}

pub fn format_ms(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

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
