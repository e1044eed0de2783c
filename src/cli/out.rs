//! Writing results to stdout: a closed or failing stdout (`verify | head -0`,
//! a harness that went away) is an ordinary error with a one-line message,
//! never a panic.

use std::io::Write;

/// stdout is closed or failing.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to stdout: {0}")]
pub struct OutError(#[source] pub std::io::Error);

/// Write `text` to stdout and flush it.
pub fn write(text: &str) -> Result<(), OutError> {
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes())
        .and_then(|()| o.flush())
        .map_err(OutError)
}

/// `println!` that returns an error instead of panicking.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::out::write(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that returns an error instead of panicking.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::out::write(&format!($($arg)*))
    };
}
