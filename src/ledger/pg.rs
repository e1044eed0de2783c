//! The PostgreSQL store: one ledger for every runner that can reach the
//! database.
//!
//! - A Goal's records are serialised by a row lock on its head row
//!   (`SELECT … FOR UPDATE`) for admission's read-check-append; the
//!   `executing` record and the use row (primary key `(lease_id,
//!   use_number)`, so even a bug cannot spend one use twice) are committed
//!   in that transaction before the child is spawned.
//! - The records are the journal's (`journal::Record`, the same JSON line and
//!   SHA-256 chain), checked on every read.
//! - A runner holds a session advisory lock keyed by its attempt for the
//!   attempt's lifetime. A dead runner's connection ends and the server
//!   releases the lock: every runner then reads that attempt as `unknown`.
//! - Connection settings other than host, port and database come only from
//!   the libpq environment (`PGUSER`, `PGPASSWORD`, `PGPASSFILE`,
//!   `PGSERVICE`/`PGSERVICEFILE`, `PGSSLMODE`, `PGSSLROOTCERT`,
//!   `PGCONNECT_TIMEOUT`, `PGAPPNAME`), never from the lease, and no error
//!   text carries them.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use postgres::config::SslMode;
use postgres::{Client, NoTls};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

use crate::ledger::journal::{
    self, Committed, Entry, Event, Record, Summary, GENESIS, JOURNAL_VERSION,
};
use crate::model::digest::sha256_hex;

use super::{AttemptHold, BrokenChain, Chain, GoalSession, Ledger, LedgerError};

/// The schema version this binary writes and reads.
pub const SCHEMA_VERSION: &str = "1";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS governed_exec_meta (
    key text PRIMARY KEY,
    value text NOT NULL);
CREATE TABLE IF NOT EXISTS governed_exec_goals (
    goal_id text PRIMARY KEY,
    next_seq bigint NOT NULL,
    last_digest text NOT NULL);
CREATE TABLE IF NOT EXISTS governed_exec_records (
    goal_id text NOT NULL REFERENCES governed_exec_goals (goal_id),
    seq bigint NOT NULL,
    digest text NOT NULL,
    line text NOT NULL,
    PRIMARY KEY (goal_id, seq));
CREATE TABLE IF NOT EXISTS governed_exec_uses (
    lease_id text NOT NULL,
    use_number bigint NOT NULL,
    attempt_id text NOT NULL UNIQUE,
    goal_id text NOT NULL,
    PRIMARY KEY (lease_id, use_number));
";

/// Serialises schema creation between runners that start at once.
const SCHEMA_LOCK: (i32, i32) = (0x6765_7865, 1);

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

pub struct PgLedger {
    target: PgTarget,
    /// A connection for liveness checks of `journal list`.
    probe: RefCell<Option<Client>>,
}

impl PgLedger {
    pub fn new(target: PgTarget) -> PgLedger {
        PgLedger {
            target,
            probe: RefCell::new(None),
        }
    }

    fn unavailable(&self, what: &str, e: impl fmt::Display) -> LedgerError {
        LedgerError::Unavailable(format!("ledger {}: {what}: {e}", self.target))
    }

    fn connect(&self) -> Result<Client, LedgerError> {
        let env = LibpqEnv::read();
        let mut cfg = postgres::Config::new();
        // A host name is resolved here, on this thread, and each address
        // given as `hostaddr` (the name stays `host`, for TLS): the client
        // would resolve it on a thread of its own that outlives the
        // connection by seconds, and a process with a second thread can no
        // longer enter the user namespace a non-root runner's isolation
        // needs.
        match resolve_on_this_thread(&self.target.host, self.target.port) {
            None => {
                cfg.host(&self.target.host);
            }
            Some(Ok(addrs)) => {
                for a in addrs {
                    cfg.host(&self.target.host).hostaddr(a);
                }
            }
            Some(Err(e)) => {
                return Err(
                    self.unavailable("connect", format!("resolving {}: {e}", self.target.host))
                )
            }
        }
        cfg.port(self.target.port)
            .dbname(&self.target.dbname)
            .application_name(env.appname.as_deref().unwrap_or("governed-exec"))
            .connect_timeout(env.connect_timeout)
            // A peer that vanished mid-transaction is noticed by the client
            // too (the server side is set per session in `spend`).
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30));
        let user = env.user.clone().unwrap_or_else(os_user);
        cfg.user(&user);
        if let Some(p) = env.password.clone().or_else(|| pgpass(&self.target, &user)) {
            cfg.password(p);
        }
        let mode = env.sslmode.as_deref().unwrap_or("prefer");
        let client = match ssl_mode(mode) {
            Some(SslMode::Disable) => cfg.ssl_mode(SslMode::Disable).connect(NoTls),
            Some(ssl) => {
                let tls = tls_config(mode, env.sslrootcert.as_deref())
                    .map_err(|e| self.unavailable("TLS", e))?;
                cfg.ssl_mode(ssl)
                    .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))
            }
            None => {
                return Err(self.unavailable(
                    "PGSSLMODE",
                    format!("{mode:?} is not one of disable, allow, prefer, require, verify-ca, verify-full"),
                ))
            }
        };
        let mut client = client.map_err(|e| self.unavailable("connect", cause(&e)))?;
        self.ensure_schema(&mut client)?;
        Ok(client)
    }

    /// Create the schema on first use; refuse one of another version.
    fn ensure_schema(&self, c: &mut Client) -> Result<(), LedgerError> {
        let version = |c: &mut Client| -> Result<Option<String>, postgres::Error> {
            let exists: Option<String> = c
                .query_one("SELECT to_regclass('governed_exec_meta')::text", &[])?
                .get(0);
            if exists.is_none() {
                return Ok(None);
            }
            Ok(c.query_opt(
                "SELECT value FROM governed_exec_meta WHERE key = 'schema_version'",
                &[],
            )?
            .map(|r| r.get(0)))
        };
        let mut v = version(c).map_err(|e| self.unavailable("schema", cause(&e)))?;
        if v.is_none() {
            let create = |c: &mut Client| -> Result<(), postgres::Error> {
                let mut t = c.transaction()?;
                t.execute(
                    "SELECT pg_advisory_xact_lock($1, $2)",
                    &[&SCHEMA_LOCK.0, &SCHEMA_LOCK.1],
                )?;
                t.batch_execute(SCHEMA)?;
                t.execute(
                    "INSERT INTO governed_exec_meta (key, value) VALUES ('schema_version', $1) \
                     ON CONFLICT (key) DO NOTHING",
                    &[&SCHEMA_VERSION],
                )?;
                t.commit()
            };
            create(c).map_err(|e| self.unavailable("creating the schema", cause(&e)))?;
            v = version(c).map_err(|e| self.unavailable("schema", cause(&e)))?;
        }
        match v.as_deref() {
            Some(SCHEMA_VERSION) => Ok(()),
            other => Err(LedgerError::Unavailable(format!(
                "ledger {}: schema version {:?}, but this binary knows version {SCHEMA_VERSION} only",
                self.target,
                other.unwrap_or("none")
            ))),
        }
    }

    /// Read and check one Goal's chain on `c`.
    fn read_chain(
        &self,
        c: &mut Client,
        goal_id: &str,
    ) -> Result<(i64, String, Vec<Entry>), LedgerError> {
        let head = c
            .query_opt(
                "SELECT next_seq, last_digest FROM governed_exec_goals WHERE goal_id = $1",
                &[&goal_id],
            )
            .map_err(|e| self.unavailable("read", cause(&e)))?;
        let (next_seq, last): (i64, String) = match head {
            Some(r) => (r.get(0), r.get(1)),
            None => (0, GENESIS.to_string()),
        };
        let rows = c
            .query(
                "SELECT seq, digest, line FROM governed_exec_records WHERE goal_id = $1 ORDER BY seq",
                &[&goal_id],
            )
            .map_err(|e| self.unavailable("read", cause(&e)))?;
        let rows: Vec<StoredRow> = rows
            .iter()
            .map(|r| StoredRow {
                seq: r.get(0),
                digest: r.get(1),
                line: r.get(2),
            })
            .collect();
        let entries = check_rows(&self.target, goal_id, &rows, next_seq, &last)?;
        Ok((next_seq, last, entries))
    }
}

/// One row of `governed_exec_records`: its columns as stored, each of which
/// a holder of the database can edit on its own (fuzzed by
/// `testing::fuzzing::pg_rows`).
pub(crate) struct StoredRow {
    pub(crate) seq: i64,
    pub(crate) digest: String,
    pub(crate) line: String,
}

/// The rows of a Goal's chain, checked: the lines re-parsed as one chain,
/// each row's stored `seq` and `digest` equal to its line's, and the head
/// row naming the last record.
pub(crate) fn check_rows(
    target: &PgTarget,
    goal_id: &str,
    rows: &[StoredRow],
    next_seq: i64,
    last: &str,
) -> Result<Vec<Entry>, LedgerError> {
    let label = PathBuf::from(format!("{target} goal {goal_id:?}"));
    let mut bytes = Vec::new();
    for r in rows {
        bytes.extend_from_slice(r.line.as_bytes());
        bytes.push(b'\n');
    }
    let entries =
        journal::parse_chain(&label, &bytes).map_err(|e| LedgerError::Corrupt(e.to_string()))?;
    for (e, r) in entries.iter().zip(rows) {
        let (seq, digest) = (r.seq, &r.digest);
        if i64::try_from(e.record.seq).ok() != Some(seq) || &e.digest != digest {
            return Err(LedgerError::Corrupt(format!(
                "{}: record {seq}: stored digest or sequence does not match its line",
                label.display()
            )));
        }
    }
    let tail_ok = match entries.last() {
        Some(e) => e.digest == last && i64::try_from(e.record.seq + 1).ok() == Some(next_seq),
        None => next_seq == 0 && last == GENESIS,
    };
    if !tail_ok {
        return Err(LedgerError::Corrupt(format!(
            "{}: the head row does not match the last record (records removed?)",
            label.display()
        )));
    }
    Ok(entries)
}

/// The advisory lock key of an attempt.
fn lock_key(attempt_id: &str) -> i64 {
    let d = sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(
        format!("governed-exec attempt {attempt_id}").as_bytes(),
    ));
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    i64::from_be_bytes(b)
}

/// Whether some session holds the attempt's lock (taking a shared lock
/// fails only then).
fn held_elsewhere(c: &mut Client, attempt_id: &str) -> Result<bool, postgres::Error> {
    let key = lock_key(attempt_id);
    let got: bool = c
        .query_one("SELECT pg_try_advisory_lock_shared($1)", &[&key])?
        .get(0);
    if got {
        c.execute("SELECT pg_advisory_unlock_shared($1)", &[&key])?;
    }
    Ok(!got)
}

impl Ledger for PgLedger {
    fn name(&self) -> String {
        self.target.to_string()
    }

    fn protected_paths(&self) -> (Option<PathBuf>, Vec<PathBuf>) {
        (None, credential_files())
    }

    fn is_named(&self) -> bool {
        true
    }

    fn open_goal(&self, goal_id: &str) -> Result<Box<dyn GoalSession>, LedgerError> {
        let mut c = self.connect()?;
        let bound = crate::os::wait::lock_wait_bound();
        let begin = |c: &mut Client| -> Result<(), postgres::Error> {
            // No statement of this session waits on a lock past the bound.
            c.batch_execute(&format!(
                "SET lock_timeout = {}; BEGIN",
                bound.as_millis().max(1)
            ))?;
            c.execute(
                "INSERT INTO governed_exec_goals (goal_id, next_seq, last_digest) VALUES ($1, 0, $2) \
                 ON CONFLICT (goal_id) DO NOTHING",
                &[&goal_id, &GENESIS],
            )?;
            Ok(())
        };
        begin(&mut c).map_err(|e| self.unavailable("lock", cause(&e)))?;
        // The Goal's row lock, tried without waiting inside a savepoint: a
        // runner stalled inside another's lock window is waited for only
        // within the bound and only while no cancelling signal is pending.
        crate::os::wait::bounded(
            bound,
            crate::os::wait::Backoff::SERVER,
            || {
                c.batch_execute("SAVEPOINT goal_lock")
                    .map_err(|e| self.unavailable("lock", cause(&e)))?;
                match c.execute(
                    "SELECT 1 FROM governed_exec_goals WHERE goal_id = $1 FOR UPDATE NOWAIT",
                    &[&goal_id],
                ) {
                    Ok(_) => Ok(Some(())),
                    Err(e) if e.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
                        c.batch_execute("ROLLBACK TO SAVEPOINT goal_lock")
                            .map_err(|e| self.unavailable("lock", cause(&e)))?;
                        Ok(None)
                    }
                    Err(e) => Err(self.unavailable("lock", cause(&e))),
                }
            },
            |end| match end {
                crate::os::wait::WaitEnd::Cancelled(sig) => LedgerError::Cancelled(sig),
                timed_out => LedgerError::Unavailable(format!(
                    "ledger {}: goal {goal_id:?} is locked: {timed_out}",
                    self.target
                )),
            },
        )?;
        let (next_seq, last, entries) = self.read_chain(&mut c, goal_id)?;
        let summary = Summary::of(&entries);
        let mut live = BTreeSet::new();
        for id in summary.open.keys() {
            if held_elsewhere(&mut c, id).map_err(|e| self.unavailable("read", cause(&e)))? {
                live.insert(id.clone());
            }
        }
        Ok(Box::new(PgGoal {
            target: self.target.clone(),
            client: c,
            goal_id: goal_id.to_string(),
            next_seq,
            last,
            summary,
            live,
        }))
    }

    fn chains(&self) -> Result<Vec<Chain>, LedgerError> {
        let mut c = self.connect()?;
        let goals = c
            .query(
                "SELECT goal_id FROM governed_exec_goals ORDER BY goal_id",
                &[],
            )
            .map_err(|e| self.unavailable("read", cause(&e)))?;
        let mut out = Vec::new();
        for g in goals {
            let id: String = g.get(0);
            let label = format!("{} goal {id:?}", self.target);
            match self.read_chain(&mut c, &id) {
                Ok((_, _, e)) => out.push((label, Ok(e))),
                Err(LedgerError::Corrupt(m)) => out.push((label, Err(BrokenChain(m)))),
                Err(e) => return Err(e),
            }
        }
        *self.probe.borrow_mut() = Some(c);
        Ok(out)
    }

    fn attempt_is_live(&self, attempt_id: &str) -> bool {
        let mut probe = self.probe.borrow_mut();
        if probe.is_none() {
            *probe = self.connect().ok();
        }
        match probe.as_mut() {
            // Cannot tell: never claim a runner is gone.
            None => true,
            Some(c) => held_elsewhere(c, attempt_id).unwrap_or(true),
        }
    }
}

struct PgGoal {
    target: PgTarget,
    client: Client,
    goal_id: String,
    next_seq: i64,
    last: String,
    summary: Summary,
    live: BTreeSet<String>,
}

impl PgGoal {
    fn unavailable(&self, what: &str, e: impl fmt::Display) -> LedgerError {
        LedgerError::Unavailable(format!("ledger {}: {what}: {e}", self.target))
    }
}

/// Append one record at the head `(next_seq, last)` on `c` (inside the
/// caller's transaction). Returns the new head's digest.
fn insert_record(
    c: &mut Client,
    goal_id: &str,
    next_seq: i64,
    last: &str,
    event: Event,
) -> Result<Entry, postgres::Error> {
    let record = Record {
        v: JOURNAL_VERSION,
        seq: u64::try_from(next_seq).unwrap_or_default(),
        prev: last.to_string(),
        at: journal::now_rfc3339(),
        event,
    };
    let line = serde_json::to_string(&record).unwrap_or_default();
    let digest = sha256_hex(line.as_bytes());
    c.execute(
        "INSERT INTO governed_exec_records (goal_id, seq, digest, line) VALUES ($1, $2, $3, $4)",
        &[&goal_id, &next_seq, &digest, &line],
    )?;
    c.execute(
        "UPDATE governed_exec_goals SET next_seq = $2, last_digest = $3 WHERE goal_id = $1",
        &[&goal_id, &(next_seq + 1), &digest],
    )?;
    Ok(Entry { record, digest })
}

impl GoalSession for PgGoal {
    fn summary(&self) -> &Summary {
        &self.summary
    }

    fn is_live(&self, attempt_id: &str) -> bool {
        self.live.contains(attempt_id)
    }

    fn append(&mut self, event: Event) -> Result<String, LedgerError> {
        let e = insert_record(
            &mut self.client,
            &self.goal_id,
            self.next_seq,
            &self.last,
            event,
        )
        .map_err(|e| self.unavailable("write", cause(&e)))?;
        self.next_seq += 1;
        self.last = e.digest.clone();
        self.summary.fold(&e);
        Ok(e.digest)
    }

    fn commit(mut self: Box<Self>) -> Result<(), LedgerError> {
        self.client
            .batch_execute("COMMIT")
            .map_err(|e| self.unavailable("commit", cause(&e)))
    }

    fn spend(
        mut self: Box<Self>,
        attempt_id: &str,
        executing: Event,
    ) -> Result<(Committed, Box<dyn AttemptHold>), LedgerError> {
        let key = lock_key(attempt_id);
        let (lease_id, use_number) = match &executing {
            Event::Executing {
                lease_id,
                use_number,
                ..
            } => (
                lease_id.clone(),
                i64::try_from(*use_number).unwrap_or(i64::MAX),
            ),
            _ => {
                return Err(LedgerError::Corrupt(
                    "spend needs an executing record".into(),
                ))
            }
        };
        // The witness first, then the use and the record, in one commit.
        // Server-side keepalives bound how long a vanished machine's
        // connection (and so its lock) can outlive it.
        self.client
            .batch_execute(
                "SET tcp_keepalives_idle = 30; SET tcp_keepalives_interval = 10; SET tcp_keepalives_count = 3",
            )
            .map_err(|e| self.unavailable("session settings", cause(&e)))?;
        self.client
            .execute("SELECT pg_advisory_lock($1)", &[&key])
            .map_err(|e| self.unavailable("attempt lock", cause(&e)))?;
        let goal_id = self.goal_id.clone();
        self.client
            .execute(
                "INSERT INTO governed_exec_uses (lease_id, use_number, attempt_id, goal_id) \
                 VALUES ($1, $2, $3, $4)",
                &[&lease_id, &use_number, &attempt_id, &goal_id],
            )
            .map_err(|e| self.unavailable("spend", cause(&e)))?;
        let digest = self.append(executing)?;
        self.client
            .batch_execute("COMMIT")
            .map_err(|e| self.unavailable("commit", cause(&e)))?;
        let PgGoal { target, client, .. } = *self;
        // COMMIT returned: the record and the use row are durable.
        Ok((
            Committed::after_durable_write(attempt_id.to_string(), digest),
            Box::new(PgAttempt {
                target,
                client,
                goal_id,
                key,
            }),
        ))
    }
}

struct PgAttempt {
    target: PgTarget,
    client: Client,
    goal_id: String,
    key: i64,
}

impl AttemptHold for PgAttempt {
    fn record_result(&mut self, result: Event) -> Result<String, LedgerError> {
        let goal_id = self.goal_id.clone();
        let write = |c: &mut Client| -> Result<String, postgres::Error> {
            c.batch_execute("BEGIN")?;
            let head = c.query_one(
                "SELECT next_seq, last_digest FROM governed_exec_goals WHERE goal_id = $1 FOR UPDATE",
                &[&goal_id],
            )?;
            let (next_seq, last): (i64, String) = (head.get(0), head.get(1));
            let e = insert_record(c, &goal_id, next_seq, &last, result)?;
            c.batch_execute("COMMIT")?;
            Ok(e.digest)
        };
        write(&mut self.client)
            .map_err(|e| LedgerError::Unavailable(format!("ledger {}: write: {e}", self.target)))
    }

    fn release(mut self: Box<Self>) {
        let _ = self
            .client
            .execute("SELECT pg_advisory_unlock($1)", &[&self.key]);
    }
}

/// The libpq environment variables this store honours.
struct LibpqEnv {
    user: Option<String>,
    password: Option<String>,
    sslmode: Option<String>,
    sslrootcert: Option<PathBuf>,
    appname: Option<String>,
    connect_timeout: Duration,
}

impl LibpqEnv {
    fn read() -> LibpqEnv {
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

/// `PGCONNECT_TIMEOUT` in seconds; where libpq would wait forever (0, or
/// nothing readable), 10 s: a run is never held by an unanswering server.
fn connect_timeout(given: Option<String>) -> Duration {
    Duration::from_secs(
        given
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|t| *t > 0)
            .unwrap_or(10),
    )
}

fn home() -> Option<PathBuf> {
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

/// The `[service]` section of `PGSERVICEFILE` (default `~/.pg_service.conf`).
fn service_entries(service: &str) -> BTreeMap<String, String> {
    let file = std::env::var_os("PGSERVICEFILE")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".pg_service.conf")));
    let Some(text) = file.and_then(|f| std::fs::read_to_string(f).ok()) else {
        return BTreeMap::new();
    };
    service_section(&text, service)
}

/// The `[service]` section of a service file's text, `key=value` each.
pub(crate) fn service_section(text: &str, service: &str) -> BTreeMap<String, String> {
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

/// The password for this target from `PGPASSFILE` (default `~/.pgpass`),
/// in libpq's `host:port:db:user:password` format with `*` and `\` escapes.
fn pgpass(t: &PgTarget, user: &str) -> Option<String> {
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
pub(crate) fn pgpass_lookup(text: &str, want: [&str; 4]) -> Option<String> {
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

/// libpq's default user: the OS user name. Read from `$USER`/`$LOGNAME`,
/// else `/etc/passwd` directly (no NSS call: the static build stays safe).
fn os_user() -> String {
    os_user_given(
        std::env::var("USER")
            .ok()
            .or_else(|| std::env::var("LOGNAME").ok()),
        nix::unistd::getuid().as_raw(),
        || std::fs::read_to_string("/etc/passwd").ok(),
    )
}

/// libpq's default user: `USER` (or `LOGNAME`) when not empty, else the
/// name `passwd` gives this uid, else `postgres`.
fn os_user_given(env: Option<String>, uid: u32, passwd: impl FnOnce() -> Option<String>) -> String {
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

/// libpq's `sslmode` semantics on rustls: `prefer`/`require` encrypt
/// without checking the server's certificate (unless a root certificate
/// file exists, when `require` checks the chain like `verify-ca`);
/// `verify-ca` checks the chain; `verify-full` the chain and the host name.
/// Why no TLS configuration could be made for the ledger's connection
/// (`ledger_unavailable`, through `LedgerError::Unavailable`).
#[derive(Debug, thiserror::Error)]
enum TlsError {
    #[error("PGSSLMODE={0} needs a root certificate: set PGSSLROOTCERT or create ~/.postgresql/root.crt")]
    NoRoot(String),
    #[error("root certificates {path}: {source}")]
    Pem {
        path: String,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("root certificates {path}: {source}")]
    Roots {
        path: String,
        #[source]
        source: rustls::Error,
    },
    #[error("root certificates {path}: {source}")]
    Verifier {
        path: String,
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    #[error(transparent)]
    Protocol(#[from] rustls::Error),
}

/// Whether the server's certificate chain is checked against a root:
/// always under `verify-ca` and `verify-full`; under `require` only when a
/// root file is there (libpq's rule, so `require` with a root is
/// `verify-ca`); never under `allow` or `prefer`.
fn checks_the_chain(mode: &str, root_given: bool) -> bool {
    match mode {
        "verify-ca" | "verify-full" => true,
        "require" => root_given,
        _ => false,
    }
}

fn tls_config(mode: &str, rootcert: Option<&Path>) -> Result<rustls::ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let default_root = home().map(|h| h.join(".postgresql/root.crt"));
    let root_file = rootcert
        .map(Path::to_path_buf)
        .or(default_root)
        .filter(|p| p.exists());
    let verifying = checks_the_chain(mode, root_file.is_some());
    let inner = if verifying {
        let file = root_file.ok_or_else(|| TlsError::NoRoot(mode.to_string()))?;
        let path = || file.display().to_string();
        let pem = |source| TlsError::Pem {
            path: path(),
            source,
        };
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&file).map_err(pem)? {
            roots
                .add(c.map_err(pem)?)
                .map_err(|source| TlsError::Roots {
                    path: path(),
                    source,
                })?;
        }
        Some(
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|source| TlsError::Verifier {
                    path: path(),
                    source,
                })?,
        )
    } else {
        None
    };
    let verifier = Arc::new(Verifier {
        inner,
        check_name: mode == "verify-full",
        provider: provider.clone(),
    });
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

#[derive(Debug)]
struct Verifier {
    inner: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(v) = &self.inner else {
            return Ok(ServerCertVerified::assertion());
        };
        match v.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// How libpq's `PGSSLMODE` is carried out: `allow` and `prefer` take TLS
/// when the server offers it; `require`, `verify-ca` and `verify-full`
/// refuse a server without it (the last two also check its certificate,
/// in `tls_config`). `None` for a mode libpq does not have.
fn ssl_mode(mode: &str) -> Option<SslMode> {
    match mode {
        "disable" => Some(SslMode::Disable),
        "allow" | "prefer" => Some(SslMode::Prefer),
        "require" | "verify-ca" | "verify-full" => Some(SslMode::Require),
        _ => None,
    }
}

/// The addresses of `host`, resolved by the C library on the calling
/// thread, each once, in its order; `None` for a literal address or a Unix
/// socket directory, which need no resolving. No address at all is an
/// error, as the client would make it.
fn resolve_on_this_thread(host: &str, port: u16) -> Option<std::io::Result<Vec<std::net::IpAddr>>> {
    use std::net::{IpAddr, ToSocketAddrs};
    if host.starts_with('/') || host.parse::<IpAddr>().is_ok() {
        return None;
    }
    Some((host, port).to_socket_addrs().and_then(|found| {
        let mut addrs: Vec<IpAddr> = Vec::new();
        for a in found {
            if !addrs.contains(&a.ip()) {
                addrs.push(a.ip());
            }
        }
        if addrs.is_empty() {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the name has no address",
            ))
        } else {
            Ok(addrs)
        }
    }))
}

/// What a PostgreSQL error was, in the server's own words: its severity,
/// SQLSTATE, message, detail and hint (`FATAL 28000: role "ci" does not
/// exist`), or, for a failure before the server said anything, every cause
/// of the chain (`error performing TLS handshake: invalid peer
/// certificate: UnknownIssuer`), not the bare `db error` of its Display.
/// Neither the server's message nor a TLS or socket error carries the
/// password.
pub fn cause(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut m = format!(
            "the server said {} {}: {}",
            db.severity(),
            db.code().code(),
            db.message()
        );
        if let Some(d) = db.detail() {
            m.push_str(&format!(" (detail: {d})"));
        }
        if let Some(h) = db.hint() {
            m.push_str(&format!(" (hint: {h})"));
        }
        return m;
    }
    let mut parts = vec![e.to_string()];
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        let t = s.to_string();
        if parts.last() != Some(&t) {
            parts.push(t);
        }
        src = s.source();
    }
    let mut m = parts.join(": ");
    if m.contains("certificate") {
        m.push_str(" (PGSSLROOTCERT names the CA certificate that must have signed the server's; PGSSLMODE=verify-full also checks the host name)");
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_host_name_is_resolved_here_and_each_address_once() {
        assert!(resolve_on_this_thread("127.0.0.1", 5432).is_none());
        assert!(resolve_on_this_thread("::1", 5432).is_none());
        assert!(resolve_on_this_thread("/run/postgresql", 5432).is_none());
        let local = resolve_on_this_thread("localhost", 5432)
            .expect("a name is resolved")
            .expect("localhost resolves");
        assert!(local.iter().all(|a| a.is_loopback()), "{local:?}");
        let mut unique = local.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), local.len(), "{local:?}");
        assert!(matches!(
            resolve_on_this_thread("no-such-host.invalid", 5432),
            Some(Err(_))
        ));
    }

    /// Three rows of a real chain (written by the local journal, which
    /// writes the same lines), with the head row that goes with them.
    fn chain() -> (Vec<StoredRow>, i64, String) {
        let d = tempfile::tempdir().unwrap();
        let mut j = journal::Journal::open(d.path(), "g").unwrap();
        for i in 0..3 {
            j.append(Event::Revocation {
                lease_id: format!("lease-{i}"),
                by: "t".into(),
            })
            .unwrap();
        }
        drop(j);
        let file = std::fs::read_dir(d.path().join("journal"))
            .unwrap()
            .flatten()
            .map(|f| f.path())
            .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .unwrap();
        let bytes = std::fs::read(&file).unwrap();
        let entries = journal::parse_chain(&file, &bytes).unwrap();
        let rows = entries
            .iter()
            .zip(String::from_utf8(bytes).unwrap().lines())
            .map(|(e, line)| StoredRow {
                seq: e.record.seq as i64,
                digest: e.digest.clone(),
                line: line.to_string(),
            })
            .collect();
        let last = entries.last().unwrap().digest.clone();
        (rows, 3, last)
    }

    fn check(rows: &[StoredRow], next_seq: i64, last: &str) -> Result<usize, LedgerError> {
        let t = PgTarget::parse("postgres://db/l").unwrap();
        check_rows(&t, "g", rows, next_seq, last).map(|e| e.len())
    }

    /// A holder of the database can edit any one column of a row, or the
    /// head row: each edit alone is refused as corrupt (a ledger that hid
    /// a spent use or a revocation would otherwise be read as true).
    #[test]
    fn check_rows_refuses_an_edit_to_any_single_column() {
        let (rows, next, last) = chain();
        assert_eq!(check(&rows, next, &last).unwrap(), 3);
        let edited = |f: &dyn Fn(&mut StoredRow)| {
            let (mut rows, next, last) = chain();
            f(&mut rows[1]);
            check(&rows, next, &last)
        };
        assert!(edited(&|r| r.seq = 7).is_err(), "seq alone");
        assert!(
            edited(&|r| r.digest = "00".repeat(32)).is_err(),
            "digest alone"
        );
        assert!(
            edited(&|r| r.line = r.line.replace("lease-1", "lease-9")).is_err(),
            "line alone"
        );
        assert!(
            check(&rows, next + 1, &last).is_err(),
            "head next_seq alone"
        );
        assert!(
            check(&rows, next, &rows[1].digest).is_err(),
            "head digest alone"
        );
        assert!(check(&rows[..2], next, &last).is_err(), "last row removed");
    }

    /// No rows go only with the genesis head.
    #[test]
    fn no_rows_go_only_with_the_genesis_head() {
        assert_eq!(check(&[], 0, GENESIS).unwrap(), 0);
        assert!(check(&[], 1, GENESIS).is_err(), "next_seq alone");
        assert!(check(&[], 0, &"ab".repeat(32)).is_err(), "digest alone");
    }

    #[test]
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

    #[test]
    fn each_sslmode_is_carried_out_as_libpq_means_it() {
        assert_eq!(ssl_mode("disable"), Some(SslMode::Disable));
        assert_eq!(ssl_mode("allow"), Some(SslMode::Prefer));
        assert_eq!(ssl_mode("prefer"), Some(SslMode::Prefer));
        for strict in ["require", "verify-ca", "verify-full"] {
            assert_eq!(ssl_mode(strict), Some(SslMode::Require), "{strict}");
        }
        assert_eq!(ssl_mode("verify_full"), None);
        assert_eq!(ssl_mode(""), None);
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
    fn a_connect_timeout_is_always_finite() {
        let t = |s: Option<&str>| connect_timeout(s.map(str::to_string)).as_secs();
        assert_eq!(t(Some("3")), 3);
        assert_eq!(t(Some("1")), 1);
        assert_eq!(t(Some("0")), 10, "libpq's 0 waits forever; a run does not");
        assert_eq!(t(Some("soon")), 10);
        assert_eq!(t(None), 10);
    }

    #[test]
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
