//! The client: connections, the Goal's row lock, the use rows, TLS.

use std::cell::RefCell;
use std::collections::BTreeSet;
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

use crate::journal::{self, Committed, Entry, Event, Record, Summary, GENESIS, JOURNAL_VERSION};
use governed_model::digest::sha256_hex;

use crate::{AttemptHold, BrokenChain, Chain, GoalSession, Ledger, LedgerError};

use super::libpq::{checks_the_chain, home, os_user, pgpass, LibpqEnv};
use super::rows::{check_rows, StoredRow};
use super::{credential_files, PgTarget};

/// The schema version this binary writes and reads.
pub(crate) const SCHEMA_VERSION: &str = "1";

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
        let bound = governed_sys::wait::lock_wait_bound();
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
        governed_sys::wait::bounded(
            bound,
            governed_sys::wait::Backoff::SERVER,
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
                governed_sys::wait::WaitEnd::Cancelled(sig) => LedgerError::Cancelled(sig),
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

    fn chain_of(&self, goal_id: &str) -> Result<Vec<Entry>, LedgerError> {
        let mut c = self.connect()?;
        let (_, _, entries) = self.read_chain(&mut c, goal_id)?;
        *self.probe.borrow_mut() = Some(c);
        Ok(entries)
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
}
