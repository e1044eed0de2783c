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
//!
//! The parts that need no connection (the address grammar, the libpq
//! environment's files, the stored rows' check) are always built; the
//! client itself is the `postgres` cargo feature, so a build without it
//! links no tokio, rustls or x509 and refuses a `postgres://` ledger by
//! name.

mod libpq;
mod rows;
#[cfg(feature = "postgres")]
mod store;

pub use libpq::{credential_files, AddressError, PgTarget};
#[doc(hidden)]
pub use libpq::{pgpass_lookup, service_section};
pub use rows::{check_rows, StoredRow};
#[cfg(feature = "postgres")]
pub use store::{cause, PgLedger};
