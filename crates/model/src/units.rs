//! Sizes and durations as the flags, lease summaries and Goal criteria
//! write them: humantime durations (`1500ms`, `30s`, `10m`, `2h`) and bytes
//! with an optional `KiB`/`MiB`/`GiB` suffix.

use std::time::Duration;

pub(crate) const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
pub(crate) const GIB: u64 = 1024 * MIB;

/// A duration or size that does not read as one.
#[derive(Debug, thiserror::Error)]
pub enum UnitError {
    #[error("invalid duration {text:?}: {source}")]
    Duration {
        text: String,
        #[source]
        source: humantime::DurationError,
    },
    #[error("invalid size {0:?}: expected bytes with an optional KiB/MiB/GiB suffix")]
    Size(String),
}

/// `1500ms`, `30s`, `10m`, `2h` (humantime).
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    humantime::parse_duration(s).map_err(|source| UnitError::Duration {
        text: s.to_string(),
        source,
    })
}

/// Bytes with an optional `KiB`/`MiB`/`GiB` suffix.
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let (num, mult) = [("GiB", GIB), ("MiB", MIB), ("KiB", KIB), ("B", 1)]
        .iter()
        .find_map(|(suf, m)| t.strip_suffix(suf).map(|n| (n.trim(), *m)))
        .unwrap_or((t, 1));
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| UnitError::Size(s.to_string()))
}

pub fn format_size(n: u64) -> String {
    match n {
        n if n >= GIB && n % GIB == 0 => format!("{} GiB", n / GIB),
        n if n >= MIB && n % MIB == 0 => format!("{} MiB", n / MIB),
        n if n >= KIB && n % KIB == 0 => format!("{} KiB", n / KIB),
        n => format!("{n} bytes"),
    }
}

/// A measured size, rounded for people (`612.4 MiB`); exact bytes stay in
/// the receipt.
pub fn format_size_approx(n: u64) -> String {
    let f = n as f64;
    match n {
        n if n >= GIB => format!("{:.1} GiB", f / GIB as f64),
        n if n >= MIB => format!("{:.1} MiB", f / MIB as f64),
        n if n >= KIB => format!("{:.1} KiB", f / KIB as f64),
        n => format!("{n} bytes"),
    }
}

pub fn format_ms(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}
