//! Reading a Goal file: closed shape, known schema and kinds, and the digest
//! of the exact bytes that leases and receipts bind.

use std::path::{Component, Path};

use crate::digest::sha256_hex;
use crate::units::UnitError;
use crate::{parse_json, units, Criterion, Goal, GoalRef, ParseError, GOAL_SCHEMA};

/// Why a goal file was refused (`invalid_input` wherever a run or `verify`
/// meets it). `what` names the source, as in every message.
#[derive(Debug, thiserror::Error)]
pub enum GoalError {
    #[error("goal {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error("{what}: field `schema` is {found:?}, expected {GOAL_SCHEMA:?}")]
    Schema { what: String, found: String },
    #[error("{what}: field `id` is empty")]
    EmptyId { what: String },
    #[error("{what}: field `criteria` is empty: a goal needs at least one mandatory criterion")]
    NoCriteria { what: String },
    #[error("{what}: resources criterion: {source}")]
    Resources {
        what: String,
        #[source]
        source: BoundsError,
    },
    #[error("{what}: a network criterion needs `max_denied`, `only` or both")]
    NetworkCriterion { what: String },
    #[error(
        "{what}: file criterion path {path:?} must be relative to the workspace, without `..`"
    )]
    FilePath { what: String, path: String },
    #[error("{what}: file criterion {path:?} says `exists: false` and also constrains content")]
    FileContradiction { what: String, path: String },
    #[error("{what}: file criterion {path:?} needs `exists`, `contains` or `sha256`")]
    FileUnconstrained { what: String, path: String },
    #[error("{what}: file criterion {path:?}: `sha256` is not 64 hex digits")]
    FileDigest { what: String, path: String },
}

/// Why the bounds of a `resources` criterion (or `approve`'s flags for
/// them) were refused.
#[derive(Debug, thiserror::Error)]
pub enum BoundsError {
    #[error("`{field}`: {source}")]
    Field {
        field: &'static str,
        #[source]
        source: UnitError,
    },
    #[error(
        "needs at least one of `peak_memory_at_most`, `cpu_time_at_most`, `wall_time_at_most`"
    )]
    Empty,
}

/// The bounds of a `resources` criterion, parsed (bytes, milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceBounds {
    pub peak_memory_bytes: Option<u64>,
    pub cpu_time_ms: Option<u64>,
    pub wall_time_ms: Option<u64>,
}

impl ResourceBounds {
    /// Parse the criterion's fields as the flags take them; at least one
    /// bound (a criterion that bounds nothing would be met by anything).
    pub fn parse(
        memory: Option<&str>,
        cpu: Option<&str>,
        wall: Option<&str>,
    ) -> Result<ResourceBounds, BoundsError> {
        let ms = |field: &'static str, s: Option<&str>| {
            s.map(|s| {
                units::parse_duration(s)
                    .map(|d| d.as_millis() as u64)
                    .map_err(|source| BoundsError::Field { field, source })
            })
            .transpose()
        };
        let bounds = ResourceBounds {
            peak_memory_bytes: memory
                .map(|s| {
                    units::parse_size(s).map_err(|source| BoundsError::Field {
                        field: "peak_memory_at_most",
                        source,
                    })
                })
                .transpose()?,
            cpu_time_ms: ms("cpu_time_at_most", cpu)?,
            wall_time_ms: ms("wall_time_at_most", wall)?,
        };
        if bounds.peak_memory_bytes.is_none()
            && bounds.cpu_time_ms.is_none()
            && bounds.wall_time_ms.is_none()
        {
            return Err(BoundsError::Empty);
        }
        Ok(bounds)
    }
}

pub struct LoadedGoal {
    pub goal: Goal,
    pub sha256: String,
}

impl LoadedGoal {
    pub fn reference(&self) -> GoalRef {
        GoalRef {
            id: self.goal.id.clone(),
            revision: self.goal.revision,
            sha256: self.sha256.clone(),
        }
    }

    /// Workspace-relative paths of every `file` criterion, in order, once.
    pub fn product_paths(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in &self.goal.criteria {
            if let Criterion::File { path, .. } = c {
                if !out.contains(path) {
                    out.push(path.clone());
                }
            }
        }
        out
    }
}

/// Size bound of a goal file.
pub const MAX_GOAL_BYTES: u64 = 1024 * 1024;

/// Parse and check goal bytes; `what` names the source in errors.
pub fn from_bytes(what: &str, bytes: &[u8]) -> Result<LoadedGoal, GoalError> {
    let goal: Goal = parse_json(what, bytes)?;
    let what = what.to_string();
    if goal.schema != GOAL_SCHEMA {
        return Err(GoalError::Schema {
            what,
            found: goal.schema,
        });
    }
    if goal.id.is_empty() {
        return Err(GoalError::EmptyId { what });
    }
    if goal.criteria.is_empty() {
        return Err(GoalError::NoCriteria { what });
    }
    for c in &goal.criteria {
        if let Criterion::Resources {
            peak_memory_at_most,
            cpu_time_at_most,
            wall_time_at_most,
        } = c
        {
            ResourceBounds::parse(
                peak_memory_at_most.as_deref(),
                cpu_time_at_most.as_deref(),
                wall_time_at_most.as_deref(),
            )
            .map_err(|source| GoalError::Resources {
                what: what.clone(),
                source,
            })?;
        }
        if let Criterion::Network {
            max_denied: None,
            only: None,
        } = c
        {
            return Err(GoalError::NetworkCriterion { what });
        }
        if let Criterion::File {
            path: p,
            exists,
            contains,
            sha256,
        } = c
        {
            let rel = Path::new(p);
            let bad = p.is_empty()
                || rel
                    .components()
                    .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
            let path = p.clone();
            if bad {
                return Err(GoalError::FilePath { what, path });
            }
            if exists == &Some(false) && (contains.is_some() || sha256.is_some()) {
                return Err(GoalError::FileContradiction { what, path });
            }
            if exists.is_none() && contains.is_none() && sha256.is_none() {
                return Err(GoalError::FileUnconstrained { what, path });
            }
            if let Some(h) = sha256 {
                if h.len() != 64 || !h.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(GoalError::FileDigest { what, path });
                }
            }
        }
    }
    Ok(LoadedGoal {
        goal,
        sha256: sha256_hex(bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn goal_with(criterion: &str) -> Result<LoadedGoal, GoalError> {
        let text = format!(
            r#"{{"schema":"governed-exec/goal/v1","id":"g","revision":1,"criteria":[{criterion}]}}"#
        );
        from_bytes("goal.json", text.as_bytes())
    }

    /// `file` criteria name files of the workspace only: `verify` reads them
    /// back, so a path that leaves the workspace would attest another file.
    #[test]
    fn file_criteria_stay_inside_the_workspace() {
        for p in ["", "../x", "/etc/passwd", "a/../../b", "a/.."] {
            let c = format!(r#"{{"kind":"file","path":{p:?},"exists":true}}"#);
            let e = goal_with(&c)
                .err()
                .unwrap_or_else(|| panic!("{p:?} was accepted"))
                .to_string();
            assert!(e.contains("relative to the workspace"), "{p:?}: {e}");
        }
        for p in ["out/a.txt", "./x", "a/./b"] {
            let c = format!(r#"{{"kind":"file","path":{p:?},"exists":true}}"#);
            assert!(goal_with(&c).is_ok(), "{p:?} was refused");
        }
    }

    #[test]
    fn file_criteria_say_something_consistent() {
        let none = goal_with(r#"{"kind":"file","path":"x"}"#);
        assert!(none
            .err()
            .is_some_and(|e| e.to_string().contains("needs `exists`")));
        let both = goal_with(r#"{"kind":"file","path":"x","exists":false,"contains":"a"}"#);
        assert!(both
            .err()
            .is_some_and(|e| e.to_string().contains("exists: false")));
        let short = goal_with(r#"{"kind":"file","path":"x","sha256":"abc"}"#);
        assert!(short
            .err()
            .is_some_and(|e| e.to_string().contains("64 hex digits")));
        let hex = "a".repeat(64);
        assert!(goal_with(&format!(r#"{{"kind":"file","path":"x","sha256":"{hex}"}}"#)).is_ok());
    }

    /// A `resources` criterion bounds something: any one of its three
    /// bounds is enough, none at all is refused (it would be met by any
    /// run). Each bound is read in its own unit, and a bad one is named.
    #[test]
    fn a_resources_criterion_needs_at_least_one_bound() {
        use crate::units::MIB;
        let none = ResourceBounds::parse(None, None, None);
        assert!(matches!(none, Err(BoundsError::Empty)), "{none:?}");
        let one = |m, c, w| ResourceBounds::parse(m, c, w).ok();
        let bounds = |peak_memory_bytes, cpu_time_ms, wall_time_ms| {
            Some(ResourceBounds {
                peak_memory_bytes,
                cpu_time_ms,
                wall_time_ms,
            })
        };
        // Each bound alone.
        assert_eq!(
            one(Some("2 MiB"), None, None),
            bounds(Some(2 * MIB), None, None)
        );
        assert_eq!(
            one(None, Some("90s"), None),
            bounds(None, Some(90_000), None)
        );
        assert_eq!(
            one(None, None, Some("1500ms")),
            bounds(None, None, Some(1_500))
        );
        // Any two, and all three.
        assert_eq!(
            one(Some("1KiB"), Some("1m"), None),
            bounds(Some(1024), Some(60_000), None)
        );
        assert_eq!(
            one(None, Some("1s"), Some("2h")),
            bounds(None, Some(1_000), Some(7_200_000))
        );
        assert_eq!(
            one(Some("0"), Some("0s"), Some("0s")),
            bounds(Some(0), Some(0), Some(0)),
            "a zero bound is a bound"
        );
        // A bound that does not read names its field, even beside good ones.
        for (m, c, w, field) in [
            (Some("lots"), Some("1s"), None, "peak_memory_at_most"),
            (None, Some("soon"), Some("1s"), "cpu_time_at_most"),
            (Some("1"), None, Some("-1s"), "wall_time_at_most"),
        ] {
            match ResourceBounds::parse(m, c, w) {
                Err(BoundsError::Field { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        assert_eq!(
            BoundsError::Empty.to_string(),
            "needs at least one of `peak_memory_at_most`, `cpu_time_at_most`, `wall_time_at_most`"
        );
        // The goal file refuses an empty criterion with the same words.
        let e = goal_with(r#"{"kind":"resources"}"#)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("goal.json: resources criterion: needs at least one of `peak_memory_at_most`, `cpu_time_at_most`, `wall_time_at_most`")
        );
        assert!(goal_with(r#"{"kind":"resources","wall_time_at_most":"10m"}"#).is_ok());
    }

    /// The products a run hashes are the goal's `file` criteria's paths:
    /// every one, in the goal's order, each once, and nothing else.
    #[test]
    fn product_paths_are_the_file_criteria_in_order_once() {
        let g = goal_with(
            r#"{"kind":"file","path":"out/b","exists":true},
               {"kind":"exit_code","equals":0},
               {"kind":"file","path":"a","contains":"x"},
               {"kind":"file","path":"out/b","sha256":"0000000000000000000000000000000000000000000000000000000000000000"},
               {"kind":"resources","cpu_time_at_most":"1s"}"#,
        )
        .unwrap();
        assert_eq!(g.product_paths(), ["out/b", "a"]);
        let none = goal_with(r#"{"kind":"exit_code","equals":0}"#).unwrap();
        assert!(none.product_paths().is_empty());
    }

    #[test]
    fn a_goal_needs_its_schema_an_id_and_a_criterion() {
        let ok = br#"{"schema":"governed-exec/goal/v1","id":"g","revision":1,"criteria":[{"kind":"exit_code","equals":0}]}"#;
        assert!(from_bytes("g", ok).is_ok());
        let text = String::from_utf8_lossy(ok);
        for (bad, why) in [
            (text.replace("goal/v1", "goal/v9"), "schema"),
            (text.replace(r#""id":"g""#, r#""id":"""#), "`id` is empty"),
            (
                text.replace(r#"[{"kind":"exit_code","equals":0}]"#, "[]"),
                "`criteria` is empty",
            ),
        ] {
            let e = from_bytes("g", bad.as_bytes())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(why), "{why}: {e}");
        }
    }
}
