//! Bounded, cancellable waits for a lock another runner holds (a Goal's
//! journal `flock`, a PostgreSQL advisory lock). The handled signals are
//! blocked in every runner (they are read from a signalfd), so a blocking
//! lock call can never be interrupted: a runner stalled inside the lock
//! window would hold every other run of the Goal, deaf to SIGTERM. So a
//! waiter tries without blocking, backs off (1 ms doubling to 50 ms), and
//! stops when a cancelling signal is pending (left pending, so `run` still
//! reads it and refuses `cancelled_before_spawn`) or when the bound passes.

use std::time::{Duration, Instant};

use crate::os::sys;

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
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(30);

pub fn lock_wait_bound() -> Duration {
    std::env::var("GOVERNED_EXEC_LOCK_WAIT")
        .ok()
        .and_then(|v| humantime::parse_duration(v.trim()).ok())
        .unwrap_or(DEFAULT_LOCK_WAIT)
}

/// Call `attempt` until it returns `Ok(Some(_))` (got it) or an error,
/// within `bound`, as long as no cancelling signal is pending.
pub fn bounded<T, E>(
    bound: Duration,
    mut attempt: impl FnMut() -> Result<Option<T>, E>,
    ended: impl Fn(WaitEnd) -> E,
) -> Result<T, E> {
    let deadline = Instant::now() + bound;
    let mut nap = Duration::from_millis(1);
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
        nap = (nap * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_that_never_gets_it_ends_at_its_bound() {
        let start = Instant::now();
        let r: Result<(), WaitEnd> = bounded(Duration::from_millis(30), || Ok(None), |e| e);
        assert_eq!(r, Err(WaitEnd::TimedOut(Duration::from_millis(30))));
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn a_wait_returns_what_it_got_and_passes_errors_through() {
        let mut n = 0;
        let r: Result<u32, WaitEnd> = bounded(
            Duration::from_secs(5),
            || {
                n += 1;
                Ok((n == 3).then_some(7))
            },
            |e| e,
        );
        assert_eq!(r, Ok(7));
        let r: Result<u32, &str> = bounded(Duration::from_secs(5), || Err("broken"), |_| "ended");
        assert_eq!(r, Err("broken"));
    }
}
