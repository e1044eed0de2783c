//! Crash-injection points for the journal tests. Compiled to nothing unless
//! the `fault-injection` cargo feature is on, which release builds never use.

#![forbid(unsafe_code)]

/// With the feature on, abort the process (as a crash would) when
/// `GOVERNED_EXEC_FAULT` names this point.
#[cfg(feature = "enabled")]
pub fn point(name: &str) {
    if std::env::var("GOVERNED_EXEC_FAULT").as_deref() == Ok(name) {
        std::process::abort();
    }
}

#[cfg(not(feature = "enabled"))]
#[inline(always)]
pub fn point(_name: &str) {}

/// With the feature on, whether `GOVERNED_EXEC_FAULT` names this injected
/// failure (the caller then fails the way the real call would).
#[cfg(feature = "enabled")]
pub fn fail(name: &str) -> bool {
    std::env::var("GOVERNED_EXEC_FAULT").as_deref() == Ok(name)
}

#[cfg(not(feature = "enabled"))]
#[inline(always)]
pub fn fail(_name: &str) -> bool {
    false
}
