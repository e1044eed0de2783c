//! What libpq tools read besides the server: the `postgres://HOST[:PORT]/DB`
//! address (nothing else has a place in it), the environment variables, the
//! password and service files, the default user, and what `PGSSLMODE`
//! means for the chain check. No connection is made here.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// A `--ledger postgres://…` address that is not `postgres://HOST[:PORT]/DB`.
#[derive(Debug, thiserror::Error)]
pub enum AddressError {
    #[error("--ledger: expected postgres://HOST[:PORT]/DB")]
    Shape,
    #[error("--ledger: expected postgres://HOST[:PORT]/DB; a user, password or option has no place in a ledger address: credentials and TLS settings come from the libpq environment (PGUSER, PGPASSWORD, PGPASSFILE, PGSERVICEFILE, PGSSLMODE, PGSSLROOTCERT)")]
    Credentials,
    #[error("--ledger: database name {0:?}: expected postgres://HOST[:PORT]/DB")]
    Database(String),
    #[error("--ledger: host {0:?}: expected postgres://HOST[:PORT]/DB")]
    Host(String),
    #[error("--ledger: port {0:?}: expected postgres://HOST[:PORT]/DB")]
    Port(String),
}

/// `postgres://HOST[:PORT]/DB`, nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgTarget {
    pub host: String,
    pub port: u16,
    pub dbname: String,
}

impl PgTarget {
    pub fn parse(s: &str) -> Result<PgTarget, AddressError> {
        let rest = s
            .strip_prefix("postgres://")
            .or_else(|| s.strip_prefix("postgresql://"))
            .ok_or(AddressError::Shape)?;
        if rest.contains('@') || rest.contains('?') || rest.contains('#') {
            return Err(AddressError::Credentials);
        }
        let (hostport, db) = rest.split_once('/').ok_or(AddressError::Shape)?;
        let valid_db = !db.is_empty()
            && db
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
        if !valid_db {
            return Err(AddressError::Database(db.to_string()));
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or(AddressError::Shape)?;
            (h.to_string(), after.strip_prefix(':'))
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (hostport.to_string(), None),
            }
        };
        let valid_host = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:_".contains(&b));
        if !valid_host {
            return Err(AddressError::Host(host));
        }
        let port = match port {
            None => 5432,
            Some(p) => p.parse().map_err(|_| AddressError::Port(p.to_string()))?,
        };
        Ok(PgTarget {
            host,
            port,
            dbname: db.to_string(),
        })
    }
}

impl fmt::Display for PgTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(
                f,
                "postgres://[{}]:{}/{}",
                self.host, self.port, self.dbname
            )
        } else {
            write!(f, "postgres://{}:{}/{}", self.host, self.port, self.dbname)
        }
    }
}

#[cfg(feature = "postgres")]
/// The libpq environment variables this store honours.
pub(crate) struct LibpqEnv {
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) sslmode: Option<String>,
    pub(crate) sslrootcert: Option<PathBuf>,
    pub(crate) appname: Option<String>,
    pub(crate) connect_timeout: std::time::Duration,
}

#[cfg(feature = "postgres")]
impl LibpqEnv {
    pub(crate) fn read() -> LibpqEnv {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let service = var("PGSERVICE")
            .map(|s| service_entries(&s))
            .unwrap_or_default();
        let pick = |env: &str, key: &str| var(env).or_else(|| service.get(key).cloned());
        LibpqEnv {
            user: pick("PGUSER", "user"),
            password: pick("PGPASSWORD", "password"),
            sslmode: pick("PGSSLMODE", "sslmode"),
            sslrootcert: pick("PGSSLROOTCERT", "sslrootcert").map(PathBuf::from),
            appname: pick("PGAPPNAME", "application_name"),
            connect_timeout: connect_timeout(pick("PGCONNECT_TIMEOUT", "connect_timeout")),
        }
    }
}

#[cfg(feature = "postgres")]
/// `PGCONNECT_TIMEOUT` in seconds; where libpq would wait forever (0, or
/// nothing readable), 10 s: a run is never held by an unanswering server.
pub(crate) fn connect_timeout(given: Option<String>) -> std::time::Duration {
    std::time::Duration::from_secs(
        given
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|t| *t > 0)
            .unwrap_or(10),
    )
}

pub(crate) fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// The files this runner's PostgreSQL credentials come from, as libpq reads
/// them (`PGPASSFILE` or `~/.pgpass`, `PGSERVICEFILE` or
/// `~/.pg_service.conf`), where they exist: a child that reads one holds
/// the ledger's password, and one that rewrites one points later runs at a
/// ledger of its own.
pub fn credential_files() -> Vec<PathBuf> {
    let var_or_home = |var: &str, rel: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| home().map(|h| h.join(rel)))
    };
    [
        var_or_home("PGPASSFILE", ".pgpass"),
        var_or_home("PGSERVICEFILE", ".pg_service.conf"),
    ]
    .into_iter()
    .flatten()
    .filter(|p| p.is_file())
    .collect()
}

#[cfg(feature = "postgres")]
/// The `[service]` section of `PGSERVICEFILE` (default `~/.pg_service.conf`).
pub(crate) fn service_entries(service: &str) -> BTreeMap<String, String> {
    let file = std::env::var_os("PGSERVICEFILE")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".pg_service.conf")));
    let Some(text) = file.and_then(|f| std::fs::read_to_string(f).ok()) else {
        return BTreeMap::new();
    };
    service_section(&text, service)
}

/// The `[service]` section of a service file's text, `key=value` each.
pub fn service_section(text: &str, service: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name == service;
        } else if inside {
            if let Some((k, v)) = line.split_once('=') {
                out.insert(k.trim().to_string(), v.trim().to_string());
            }
        }
    }
    out
}

#[cfg(feature = "postgres")]
/// The password for this target from `PGPASSFILE` (default `~/.pgpass`),
/// in libpq's `host:port:db:user:password` format with `*` and `\` escapes.
pub(crate) fn pgpass(t: &PgTarget, user: &str) -> Option<String> {
    let file = std::env::var_os("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".pgpass")))?;
    let text = std::fs::read_to_string(file).ok()?;
    let port = t.port.to_string();
    pgpass_lookup(
        &text,
        [t.host.as_str(), port.as_str(), t.dbname.as_str(), user],
    )
}

/// The password of the first line of a `.pgpass` text whose host, port,
/// database and user fields match `want` (`*` matches anything).
pub fn pgpass_lookup(text: &str, want: [&str; 4]) -> Option<String> {
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let mut fields = Vec::new();
        let mut cur = String::new();
        let mut chars = line.chars();
        while let Some(ch) = chars.next() {
            match ch {
                '\\' => cur.extend(chars.next()),
                ':' if fields.len() < 4 => fields.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        fields.push(cur);
        if fields.len() == 5
            && fields[..4]
                .iter()
                .zip(want)
                .all(|(f, w)| f == "*" || f == w)
        {
            return fields.pop();
        }
    }
    None
}

#[cfg(feature = "postgres")]
/// libpq's default user: the OS user name. Read from `$USER`/`$LOGNAME`,
/// else `/etc/passwd` directly (no NSS call: the static build stays safe).
pub(crate) fn os_user() -> String {
    os_user_given(
        std::env::var("USER")
            .ok()
            .or_else(|| std::env::var("LOGNAME").ok()),
        nix::unistd::getuid().as_raw(),
        || std::fs::read_to_string("/etc/passwd").ok(),
    )
}

#[cfg(feature = "postgres")]
/// libpq's default user: `USER` (or `LOGNAME`) when not empty, else the
/// name `passwd` gives this uid, else `postgres`.
pub(crate) fn os_user_given(
    env: Option<String>,
    uid: u32,
    passwd: impl FnOnce() -> Option<String>,
) -> String {
    let uid = uid.to_string();
    env.filter(|u| !u.is_empty())
        .or_else(|| {
            let text = passwd()?;
            text.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                (f.nth(1)? == uid).then(|| name.to_string())
            })
        })
        .unwrap_or_else(|| "postgres".into())
}

#[cfg(feature = "postgres")]
/// Whether the server's certificate chain is checked against a root:
/// always under `verify-ca` and `verify-full`; under `require` only when a
/// root file is there (libpq's rule, so `require` with a root is
/// `verify-ca`); never under `allow` or `prefer`.
pub(crate) fn checks_the_chain(mode: &str, root_given: bool) -> bool {
    match mode {
        "verify-ca" | "verify-full" => true,
        "require" => root_given,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "postgres")]
    fn pgpass_matches_with_wildcards_and_escapes() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("pgpass");
        std::fs::write(
            &f,
            "# c\nother:5432:*:*:no\n*:6543:led\\:ger:alice:s\\:ecret\n",
        )
        .unwrap();
        std::env::set_var("PGPASSFILE", &f);
        let t = PgTarget {
            host: "db".into(),
            port: 6543,
            dbname: "led:ger".into(),
        };
        assert_eq!(pgpass(&t, "alice").as_deref(), Some("s:ecret"));
        assert_eq!(pgpass(&t, "bob"), None);
        std::env::remove_var("PGPASSFILE");
    }

    /// A ledger address names a host (letters, digits, `-._:`), an optional
    /// port and a database (letters, digits, `_-.`); anything else is
    /// refused, naming the part.
    #[test]
    fn an_address_takes_only_a_plain_host_port_and_database() {
        let t = PgTarget::parse("postgres://db-1.example_x:6432/ledger_a-1.b").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.dbname.as_str()),
            ("db-1.example_x", 6432, "ledger_a-1.b")
        );
        for (bad, part) in [
            ("postgres:///ledger", "host"),
            ("postgres://:5432/ledger", "host"),
            ("postgres://db$x/ledger", "host"),
            ("postgres://db x/ledger", "host"),
            ("postgres://db/led$ger", "database"),
            ("postgres://db/led/ger", "database"),
            ("postgres://db/", "database"),
            ("postgres://db:port/ledger", "port"),
        ] {
            let e = PgTarget::parse(bad).expect_err(bad).to_string();
            assert!(e.starts_with(&format!("--ledger: {part} ")), "{bad}: {e}");
        }
        // A user, a query or a fragment: credentials and options come from
        // the libpq environment only.
        for bad in [
            "postgres://u@db/ledger",
            "postgres://db/ledger?sslmode=disable",
            "postgres://db/ledger#x",
        ] {
            assert!(
                matches!(PgTarget::parse(bad), Err(AddressError::Credentials)),
                "{bad}"
            );
        }
    }

    #[test]
    #[cfg(feature = "postgres")]
    fn a_connect_timeout_is_always_finite() {
        let t = |s: Option<&str>| connect_timeout(s.map(str::to_string)).as_secs();
        assert_eq!(t(Some("3")), 3);
        assert_eq!(t(Some("1")), 1);
        assert_eq!(t(Some("0")), 10, "libpq's 0 waits forever; a run does not");
        assert_eq!(t(Some("soon")), 10);
        assert_eq!(t(None), 10);
    }

    #[test]
    #[cfg(feature = "postgres")]
    fn the_chain_is_checked_as_libpq_checks_it() {
        for root in [false, true] {
            assert!(checks_the_chain("verify-ca", root));
            assert!(checks_the_chain("verify-full", root));
            assert!(!checks_the_chain("prefer", root));
            assert!(!checks_the_chain("allow", root));
        }
        assert!(
            checks_the_chain("require", true),
            "require with a root is verify-ca"
        );
        assert!(!checks_the_chain("require", false));
    }

    #[test]
    #[cfg(feature = "postgres")]
    fn the_default_user_is_the_environments_then_passwds_then_postgres() {
        let passwd =
            || Some("root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/a:/bin/sh\n".to_string());
        assert_eq!(os_user_given(Some("bob".into()), 1000, passwd), "bob");
        assert_eq!(os_user_given(Some(String::new()), 1000, passwd), "alice");
        assert_eq!(os_user_given(None, 1000, passwd), "alice");
        assert_eq!(os_user_given(None, 0, passwd), "root");
        assert_eq!(os_user_given(None, 7, passwd), "postgres");
        assert_eq!(os_user_given(None, 1000, || None), "postgres");
    }

    #[test]
    fn a_service_section_is_its_own_key_value_lines_only() {
        let text = "# a comment\n[other]\nuser=mallory\n\n[ledger]\n  user = alice \n# user=mallory\nsslmode=verify-full\nnot a pair\n[after]\nuser=eve\n";
        let got = service_section(text, "ledger");
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            [
                ("sslmode".to_string(), "verify-full".to_string()),
                ("user".into(), "alice".into()),
            ]
        );
        assert!(service_section(text, "missing").is_empty());
    }

    #[test]
    fn a_pgpass_password_may_hold_an_unescaped_colon() {
        assert_eq!(
            pgpass_lookup("db:6543:x:alice:pa:ss\n", ["db", "6543", "x", "alice"]).as_deref(),
            Some("pa:ss")
        );
    }
}
