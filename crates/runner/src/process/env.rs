//! The child's environment, built only from the allowlist and the lease.
//! Nothing of the caller's environment is read here: no tokens, proxies,
//! SSH agent or cloud credentials can reach the child.

use std::collections::BTreeMap;
use std::path::Path;

use governed_model::EnvPolicy;

/// Values every child gets, unless the approver fixed another value.
pub(crate) fn child_env(policy: &EnvPolicy, home: &Path, tmp: &Path) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("HOME".to_string(), home.display().to_string());
    env.insert("TMPDIR".to_string(), tmp.display().to_string());
    env.insert("PATH".to_string(), policy.path.clone());
    env.insert("LANG".to_string(), "C.UTF-8".to_string());
    env.insert("LC_ALL".to_string(), "C.UTF-8".to_string());
    env.insert("TZ".to_string(), "UTC".to_string());
    for (k, v) in &policy.fixed {
        env.insert(k.clone(), v.clone());
    }
    env
}

/// How the approval summary describes the environment.
pub fn describe(policy: &EnvPolicy) -> String {
    let shown = child_env(
        policy,
        Path::new("<fresh private dir>"),
        Path::new("<fresh private dir>"),
    );
    let vars: Vec<String> = shown
        .iter()
        .map(|(k, v)| format!("{k}={}", serde_json::to_string(v).unwrap_or_default()))
        .collect();
    format!(
        "{}; nothing else of the caller's environment",
        vars.join(" ")
    )
}

/// A `--env` that is not `KEY=VALUE` with a valid name and value.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("--env {0:?}: expected KEY=VALUE")]
    NoAssignment(String),
    #[error("--env {text:?}: invalid variable name {key:?}")]
    Name { text: String, key: String },
    #[error("--env {0}: value contains a NUL byte")]
    Nul(String),
}

/// Validate one `--env KEY=VALUE`.
pub fn parse_assignment(s: &str) -> Result<(String, String), EnvError> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| EnvError::NoAssignment(s.to_string()))?;
    let valid_key = !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid_key {
        return Err(EnvError::Name {
            text: s.to_string(),
            key: k.to_string(),
        });
    }
    if v.contains('\0') {
        return Err(EnvError::Nul(k.to_string()));
    }
    Ok((k.to_string(), v.to_string()))
}
