//! Bounded, cancellable waits for a lock another runner holds (a Goal's
//! journal `flock`, a PostgreSQL advisory lock). The handled signals are
//! blocked in every runner (they are read from a signalfd), so a blocking
//! lock call can never be interrupted: a runner stalled inside the lock
//! window would hold every other run of the Goal, deaf to SIGTERM. So a
//! waiter tries without blocking, backs off ([`Backoff`]), and stops when a
//! cancelling signal is pending (left pending, so `run` still reads it and
//! refuses `cancelled_before_spawn`) or when the bound passes.
//!
//! The back-off is the lock's hand-over time: a Goal's journal lock is held
//! about a millisecond per run, so a waiter that slept up to 50 ms between
//! tries made 12 concurrent runs of one Goal no faster than 12 in a row
//! (`scripts/bench.sh`, figure 4). A local file lock costs one `flock` call
//! per try and is tried every 2 ms at most; a server's lock costs a round
//! trip and is tried less often.

use std::time::{Duration, Instant};

use crate as sys;

/// Why a bounded wait ended without the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WaitEnd {
    #[error("a cancelling signal ({0}) arrived while waiting")]
    Cancelled(i32),
    #[error("still held by another runner after {}", humantime::format_duration(*.0))]
    TimedOut(Duration),
}

/// The default bound on a lock wait; `GOVERNED_EXEC_LOCK_WAIT` (a humantime
/// duration) overrides it. A Goal's lock is held only for admission and
/// the durable executing record, milliseconds for a healthy runner.
pub(crate) const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(30);

pub fn lock_wait_bound() -> Duration {
    std::env::var("GOVERNED_EXEC_LOCK_WAIT")
        .ok()
        .and_then(|v| humantime::parse_duration(v.trim()).ok())
        .unwrap_or(DEFAULT_LOCK_WAIT)
}

/// How long a waiter sleeps between tries: `first`, doubling up to `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub cap: Duration,
}

impl Backoff {
    /// A lock on a local file (`flock`): a try is one system call.
    pub const LOCAL_FILE: Backoff = Backoff {
        first: Duration::from_micros(50),
        cap: Duration::from_millis(2),
    };
    /// A lock on a server (a PostgreSQL row): a try is a round trip.
    pub const SERVER: Backoff = Backoff {
        first: Duration::from_millis(1),
        cap: Duration::from_millis(20),
    };
}

/// Call `attempt` until it returns `Ok(Some(_))` (got it) or an error,
/// within `bound`, as long as no cancelling signal is pending, sleeping
/// between tries as `backoff` says.
pub fn bounded<T, E>(
    bound: Duration,
    backoff: Backoff,
    mut attempt: impl FnMut() -> Result<Option<T>, E>,
    ended: impl Fn(WaitEnd) -> E,
) -> Result<T, E> {
    let deadline = Instant::now() + bound;
    let mut nap = backoff.first;
    loop {
        if let Some(got) = attempt()? {
            return Ok(got);
        }
        if let Some(sig) = sys::pending_cancel_signal() {
            return Err(ended(WaitEnd::Cancelled(sig)));
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(ended(WaitEnd::TimedOut(bound)));
        }
        std::thread::sleep(nap.min(deadline - now));
        nap = (nap * 2).min(backoff.cap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_that_never_gets_it_ends_at_its_bound() {
        let start = Instant::now();
        let r: Result<(), WaitEnd> = bounded(
            Duration::from_millis(30),
            Backoff::LOCAL_FILE,
            || Ok(None),
            |e| e,
        );
        assert_eq!(r, Err(WaitEnd::TimedOut(Duration::from_millis(30))));
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn a_wait_returns_what_it_got_and_passes_errors_through() {
        let mut n = 0;
        let r: Result<u32, WaitEnd> = bounded(
            Duration::from_secs(5),
            Backoff::SERVER,
            || {
                n += 1;
                Ok((n == 3).then_some(7))
            },
            |e| e,
        );
        assert_eq!(r, Ok(7));
        let r: Result<u32, &str> = bounded(
            Duration::from_secs(5),
            Backoff::LOCAL_FILE,
            || Err("broken"),
            |_| "ended",
        );
        assert_eq!(r, Err("broken"));
    }
}
