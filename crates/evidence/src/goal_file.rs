//! A goal file read from disk: the bytes come through `safe_io` (a regular
//! file, opened without blocking, bounded), the shape and its checks are
//! `model::goal`'s. Kept here, above the model, so the file shapes read no
//! file themselves.

use std::path::Path;

use governed_model::goal::{from_bytes, GoalError, LoadedGoal, MAX_GOAL_BYTES};

/// The goal at `path`, read and checked.
pub fn load(path: &Path) -> Result<LoadedGoal, GoalError> {
    let bytes = governed_sys::safe_io::read_bounded(path, MAX_GOAL_BYTES).map_err(|source| {
        GoalError::Read {
            path: path.display().to_string(),
            source,
        }
    })?;
    from_bytes(&format!("goal {}", path.display()), &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A goal file is read up to `MAX_GOAL_BYTES`: exactly that many bytes
    /// load, one more is refused before parsing.
    #[test]
    fn the_goal_size_bound_is_exact() {
        let d = tempfile::tempdir().unwrap();
        let body = br#"{"schema":"governed-exec/goal/v1","id":"g","revision":1,"criteria":[{"kind":"exit_code","equals":0}]}"#;
        let sized = |n: u64| {
            let mut b = body.to_vec();
            b.resize(usize::try_from(n).unwrap(), b' ');
            let p = d.path().join(format!("goal-{n}.json"));
            std::fs::write(&p, b).unwrap();
            load(&p).map(|_| ()).map_err(|e| e.to_string())
        };
        assert_eq!(sized(MAX_GOAL_BYTES), Ok(()), "exactly at the bound");
        let over = sized(MAX_GOAL_BYTES + 1).unwrap_err();
        assert!(over.contains("byte bound"), "{over}");
        assert_eq!(MAX_GOAL_BYTES, 1 << 20, "the documented 1 MiB");
    }
}
