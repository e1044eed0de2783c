//! The egress allowlist (CONTRACT §8): an HTTP proxy that is the child's
//! only way out.
//!
//! The acceptor thread is started first, in the runner's own network
//! namespace (after the user namespace, when there is one); then the
//! runner's main thread unshares a network namespace holding only loopback
//! (as for `--no-network`, in `isolation::enter_namespaces`) and binds
//! [`PROXY_ADDR`] there before anything is spawned: the listening socket
//! lives in the child's namespace and exists before the child's program can
//! run. Namespaces belong to threads, so the acceptor and every thread it
//! starts resolve and dial from the runner's own network while accepting
//! and relaying on sockets of the child's. A program that ignores the proxy
//! variables has no route at all.
//!
//! Per connection: read one request head (bounded in size and time); `CONNECT
//! host:port` (TLS passes through untouched) or an absolute-form `http://`
//! request go on only when `host:port` is an entry of the lease; anything
//! else is answered 403 naming the `--allow-net` to add. Names are resolved
//! here (`resolve.rs`, no NSS), and an address that is loopback,
//! link-local, private or the runner's own is dialled only when the lease
//! lists it as an IP literal. Relaying is two blocking copy loops per
//! connection (one per direction); at most [`MAX_ACTIVE`] connections at
//! once, each attempt recorded for the receipt (the first [`MAX_RECORDED`]
//! in full, the rest counted).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::process::resolve;
use governed_model::{Connection, NetDecision, NetworkReport};

/// Where the child finds the proxy: loopback of its own namespace, where
/// nothing else can have taken the port.
pub const PROXY_ADDR: &str = "127.0.0.1:3128";
/// [`PROXY_ADDR`] as an address: binding or dialling a string would go
/// through the std resolver, and the static release calls no NSS function.
const PROXY_SOCKADDR: ([u8; 4], u16) = ([127, 0, 0, 1], 3128);
/// The files the proxy's resolver reads, as glibc's `hosts: files dns`.
const HOSTS: &str = "/etc/hosts";
const RESOLV_CONF: &str = "/etc/resolv.conf";
/// Bounds on them: far above any real one (a large blocklist-style hosts
/// file is a few MiB; glibc reads at most three nameservers).
const HOSTS_MAX: u64 = 16 << 20;
const RESOLV_CONF_MAX: u64 = 1 << 20;
/// Connections relayed at once; more are answered 503 and recorded denied.
pub(crate) const MAX_ACTIVE: usize = 64;
/// Connection attempts listed in the receipt; the rest are counted.
pub(crate) const MAX_RECORDED: usize = 256;
const HEAD_MAX: usize = 16 * 1024;
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// All the dialling one connection may do, however many addresses its name
/// has (a name the child's DNS answers can carry a hundred).
const DIAL_BUDGET: Duration = Duration::from_secs(10);
/// The most one address may take of it, so later ones still get a turn.
const DIAL_ATTEMPT: Duration = Duration::from_secs(4);
/// How long [`Proxy::finish`] waits for the workers once their sockets are
/// cut and their waits woken: each ends at once then, so this only bounds
/// one that does not; its connection is recorded as cut all the same.
const JOIN_BOUND: Duration = Duration::from_secs(1);
/// The reason of a connection the end of the run cut before it was relayed.
const RUN_ENDED: &str = "run_ended";
const COPY_BUF: usize = 128 * 1024;

/// One `--allow-net` entry, in canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allow {
    pub host: AllowHost,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowHost {
    Name(String),
    Ip(IpAddr),
}

#[derive(Debug, thiserror::Error)]
pub enum AllowError {
    #[error("--allow-net {0:?}: wildcards are not allowed; list each exact host")]
    Wildcard(String),
    #[error("--allow-net {0:?}: the port must be a number from 1 to 65535")]
    Port(String),
    #[error("--allow-net {0:?}: not a host name or IP literal (HOST[:PORT], an IPv6 literal in brackets with a port)")]
    Host(String),
}

impl Allow {
    /// `HOST[:PORT]`, PORT 443 by default; `[v6]:PORT` or a bare IPv6
    /// literal. Host names are lower-cased and must be plain DNS names.
    pub fn parse(s: &str) -> Result<Allow, AllowError> {
        if s.contains('*') {
            return Err(AllowError::Wildcard(s.into()));
        }
        let port_of = |p: &str| match p.parse::<u16>() {
            Ok(n) if n > 0 && !p.starts_with('+') => Ok(n),
            _ => Err(AllowError::Port(s.into())),
        };
        if let Some(rest) = s.strip_prefix('[') {
            let (ip, after) = rest
                .split_once(']')
                .ok_or_else(|| AllowError::Host(s.into()))?;
            let ip: std::net::Ipv6Addr = ip.parse().map_err(|_| AllowError::Host(s.into()))?;
            let port = match after {
                "" => 443,
                p => port_of(
                    p.strip_prefix(':')
                        .ok_or_else(|| AllowError::Host(s.into()))?,
                )?,
            };
            return Ok(Allow {
                host: AllowHost::Ip(IpAddr::V6(ip)),
                port,
            });
        }
        if let Ok(ip) = s.parse::<std::net::Ipv6Addr>() {
            return Ok(Allow {
                host: AllowHost::Ip(IpAddr::V6(ip)),
                port: 443,
            });
        }
        let (host, port) = match s.rsplit_once(':') {
            Some((h, p)) => (h, port_of(p)?),
            None => (s, 443),
        };
        Ok(Allow {
            host: parse_host(host).ok_or_else(|| AllowError::Host(s.into()))?,
            port,
        })
    }

    /// `host:port`, an IPv6 literal in brackets.
    pub fn canonical(&self) -> String {
        match &self.host {
            AllowHost::Name(n) => format!("{n}:{}", self.port),
            AllowHost::Ip(IpAddr::V4(a)) => format!("{a}:{}", self.port),
            AllowHost::Ip(IpAddr::V6(a)) => format!("[{a}]:{}", self.port),
        }
    }
}

/// A host as a request or an entry names it: an IP literal, or a DNS name
/// (lower-cased; letters, digits, `-` and `_`, dot-separated labels).
fn parse_host(h: &str) -> Option<AllowHost> {
    if let Ok(ip) = h.parse::<std::net::Ipv4Addr>() {
        return Some(AllowHost::Ip(IpAddr::V4(ip)));
    }
    let h = h.to_ascii_lowercase();
    let ok = !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        // All-numeric labels would be an IPv4 literal in another spelling.
        && !h.split('.').all(|l| l.bytes().all(|b| b.is_ascii_digit()));
    ok.then_some(AllowHost::Name(h))
}

/// The canonical entries of a lease's `allow_net`, deduplicated, in order.
pub fn canonical_list(entries: &[String]) -> Result<Vec<String>, AllowError> {
    let mut out: Vec<String> = Vec::new();
    for e in entries {
        let c = Allow::parse(e)?.canonical();
        if !out.contains(&c) {
            out.push(c);
        }
    }
    Ok(out)
}

/// The variables that point the child's HTTP clients at the proxy.
pub fn proxy_env() -> Vec<(String, String)> {
    let url = format!("http://{PROXY_ADDR}");
    ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"]
        .iter()
        .flat_map(|k| [k.to_string(), k.to_ascii_lowercase()])
        .map(|k| (k, url.clone()))
        .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot listen on {PROXY_ADDR} in the child's network namespace: {0}")]
    Listen(#[source] std::io::Error),
    #[error("the lease's allow_net: {0}")]
    Entry(#[from] AllowError),
    #[error("cannot start the proxy thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("the proxy's resolver cannot use {path}: {source}")]
    ResolverFile {
        path: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// What the proxy has seen so far.
struct Log {
    /// (acceptance order, attempt) of the first [`MAX_RECORDED`] accepted.
    connections: Vec<(u64, Connection)>,
    omitted: u64,
    used: Vec<bool>,
    /// Allowed connections being resolved or dialled: what each is
    /// recorded as if the run ends before its worker records it.
    /// Each with the index of its allowlist entry, marked used if so.
    inflight: HashMap<u64, (Connection, Instant, usize)>,
    /// Those `stop` recorded itself: their workers record nothing more.
    cut: std::collections::HashSet<u64>,
}

struct Shared {
    allow: Vec<Allow>,
    /// The runner's own addresses (in its own namespace), never dialled
    /// through a name.
    own: Mutex<Vec<IpAddr>>,
    log: Mutex<Log>,
    stopping: AtomicBool,
    active: Mutex<usize>,
    /// Every open socket of a live connection, to cut it at [`Proxy::finish`].
    open: Mutex<HashMap<u64, Vec<TcpStream>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// Readable once the run is over: every resolution and dial waits on it
    /// as well, so none outlasts the run's processes.
    stop_r: OwnedFd,
    stop_w: OwnedFd,
    next_id: AtomicU64,
    /// `/etc/hosts` and `/etc/resolv.conf` as they were when the proxy
    /// started, before the child existed: a child that may write them (a
    /// uid-0 child without a write scope) cannot choose the address behind
    /// an approved name.
    hosts: String,
    resolv: String,
}

/// The text of one of the resolver's files, read like every other input of
/// the runner: opened `O_NONBLOCK` and checked to be a regular file on the
/// fd (a symlink is followed: `/etc/resolv.conf` often is one), then read to
/// a bound. So a FIFO there never holds setup waiting for a writer (with
/// the Goal's lock, deaf to a cancelling signal), and a device such as
/// `/dev/zero` is never read without end. An absent file is empty, as for
/// glibc (no hosts entries; the loopback nameserver); anything else that is
/// not a readable regular file within the bound is an error naming it.
fn resolver_file(path: &'static str, max: u64) -> Result<String, ProxyError> {
    let err = |source| ProxyError::ResolverFile { path, source };
    let file = match governed_sys::safe_io::open_regular(std::path::Path::new(path), true) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(err(e)),
    };
    let bytes = governed_sys::safe_io::read_bounded_from(file, max).map_err(err)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The running proxy. Dropping it without [`Proxy::finish`] stops it too.
pub struct Proxy {
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    mechanism: String,
    allowed: Vec<String>,
    /// The listener was handed to the acceptor (in this thread's namespace).
    listening: bool,
}

/// The proxy's acceptor thread, started in the runner's own network
/// namespace before the child's is made; it waits for its listener.
pub struct Pending {
    // Dropped first (declaration order): without a listener the acceptor
    // ends, and only then is the proxy stopped and joined.
    listener_tx: mpsc::Sender<TcpListener>,
    proxy: Proxy,
}

impl Pending {
    /// Bind [`PROXY_ADDR`] in this thread's network namespace (by now the
    /// child's) and hand the listener to the acceptor.
    pub fn listen(self, mechanism: &str) -> Result<Proxy, ProxyError> {
        let Pending {
            listener_tx,
            mut proxy,
        } = self;
        let listener =
            TcpListener::bind(SocketAddr::from(PROXY_SOCKADDR)).map_err(ProxyError::Listen)?;
        listener.set_nonblocking(true).map_err(ProxyError::Listen)?;
        listener_tx
            .send(listener)
            .map_err(|_| ProxyError::Thread(std::io::Error::other("the proxy thread ended")))?;
        proxy.mechanism = mechanism.to_string();
        proxy.listening = true;
        Ok(proxy)
    }
}

impl Proxy {
    /// Start the acceptor thread here, in the runner's network namespace,
    /// before this (main) thread unshares the child's: namespaces are per
    /// thread, so the acceptor and every thread it starts stay in the
    /// runner's network and dial from there, while the listener and the
    /// connections it accepts live in the child's. Nothing is accepted
    /// before [`Pending::listen`].
    pub(crate) fn prepare(allowed: &[String]) -> Result<Pending, ProxyError> {
        // A signed lease holds only what `approve` wrote; an entry this
        // binary cannot read is a refusal, never an entry silently dropped.
        let allow = allowed
            .iter()
            .map(|a| Allow::parse(a))
            .collect::<Result<Vec<_>, _>>()?;
        let (stop_r, stop_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| ProxyError::Thread(e.into()))?;
        let shared = Arc::new(Shared {
            allow,
            own: Mutex::new(Vec::new()),
            log: Mutex::new(Log {
                connections: Vec::new(),
                omitted: 0,
                used: vec![false; allowed.len()],
                inflight: HashMap::new(),
                cut: std::collections::HashSet::new(),
            }),
            stopping: AtomicBool::new(false),
            active: Mutex::new(0),
            open: Mutex::new(HashMap::new()),
            workers: Mutex::new(Vec::new()),
            stop_r,
            stop_w,
            next_id: AtomicU64::new(0),
            hosts: resolver_file(HOSTS, HOSTS_MAX)?,
            resolv: resolver_file(RESOLV_CONF, RESOLV_CONF_MAX)?,
        });
        let (listener_tx, listener_rx) = mpsc::channel::<TcpListener>();
        let s = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name("egress-proxy".into())
            .spawn(move || {
                *lock(&s.own) = own_addresses();
                // No listener: the child's namespace was not made.
                if let Ok(listener) = listener_rx.recv() {
                    accept_loop(&s, &listener);
                }
            })
            .map_err(ProxyError::Thread)?;
        Ok(Pending {
            proxy: Proxy {
                shared,
                acceptor: Some(acceptor),
                mechanism: String::new(),
                allowed: allowed.to_vec(),
                listening: false,
            },
            listener_tx,
        })
    }

    fn stop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake every resolution and dial: each waits on this pipe too.
        let _ = nix::unistd::write(&self.shared.stop_w, b"x");
        // Wake the acceptor: a connection from this thread, which is in the
        // child's namespace where the listener lives (its poll times out
        // anyway).
        if self.listening {
            let _ = TcpStream::connect(SocketAddr::from(PROXY_SOCKADDR));
        }
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        // The run is over and every process of it gone: cut what is still
        // open (an upstream that never closes would hold a relay forever).
        for socks in lock(&self.shared.open).values() {
            for s in socks {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        // Each worker ends at once now (its sockets cut, its waits woken);
        // the join is bounded all the same, so nothing a worker does can
        // hold the receipt. One still running is left to end with the
        // process; its connection is recorded below.
        let workers = std::mem::take(&mut *lock(&self.shared.workers));
        let deadline = Instant::now() + JOIN_BOUND;
        for w in workers {
            while !w.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if w.is_finished() {
                let _ = w.join();
            }
        }
        let mut log = lock(&self.shared.log);
        let left: Vec<(u64, (Connection, Instant, usize))> = log.inflight.drain().collect();
        for (id, (mut conn, started, entry)) in left {
            conn.duration_ms = started.elapsed().as_millis() as u64;
            log.used[entry] = true;
            log.cut.insert(id);
            keep(&mut log, id, conn);
        }
    }

    /// Stop the proxy (after the run) and report every attempt.
    pub fn finish(mut self) -> NetworkReport {
        self.stop();
        let log = lock(&self.shared.log);
        NetworkReport {
            mechanism: self.mechanism.clone(),
            allowed: self.allowed.clone(),
            connections: {
                let mut c = log.connections.clone();
                c.sort_by_key(|(seq, _)| *seq);
                c.into_iter().map(|(_, c)| c).collect()
            },
            omitted: log.omitted,
            unused: self
                .allowed
                .iter()
                .zip(&log.used)
                .filter(|(_, used)| !**used)
                .map(|(a, _)| a.clone())
                .collect(),
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if self.acceptor.is_some() {
            self.stop();
        }
    }
}

/// The runner's own addresses, read in its own namespace.
fn own_addresses() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for a in addrs {
        let Some(sa) = a.address else { continue };
        if let Some(v4) = sa.as_sockaddr_in() {
            out.push(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = sa.as_sockaddr_in6() {
            out.push(IpAddr::V6(v6.ip()));
        }
    }
    out
}

fn accept_loop(s: &Arc<Shared>, listener: &TcpListener) {
    loop {
        // Polled, not a blocking accept: `stop` must end this loop even if
        // its wake-up connection cannot reach the listener.
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        let _ = poll(&mut fds, PollTimeout::from(250u16));
        if s.stopping.load(Ordering::SeqCst) {
            record_backlog(s, listener);
            return;
        }
        let client = match listener.accept() {
            Ok((c, _)) if c.set_nonblocking(false).is_ok() => c,
            _ => continue,
        };
        let started = (SystemTime::now(), Instant::now());
        let seq = s.next_id.fetch_add(1, Ordering::SeqCst);
        {
            let mut active = lock(&s.active);
            if *active >= MAX_ACTIVE {
                drop(active);
                let mut c = client;
                let _ = c.write_all(&response(
                    503,
                    "Service Unavailable",
                    &format!("governed-exec: more than {MAX_ACTIVE} connections at once through the egress proxy\n"),
                ));
                record(s, seq, attempt("", 0, started), "too_many_connections");
                continue;
            }
            *active += 1;
        }
        let s2 = Arc::clone(s);
        let spawned = std::thread::Builder::new()
            .name("egress-conn".into())
            .spawn(move || {
                handle(&s2, seq, client, started);
                *lock(&s2.active) -= 1;
            });
        match spawned {
            Ok(h) => {
                let mut workers = lock(&s.workers);
                workers.retain(|w| !w.is_finished());
                workers.push(h);
            }
            Err(_) => *lock(&s.active) -= 1,
        }
    }
}

/// The run is over: connections still waiting in the listener's backlog
/// are never served, but each that already sent a request is recorded as
/// denied, so a child cannot keep an attempt out of the receipt by asking
/// as it exits. (Connections that sent nothing asked for nothing.)
fn record_backlog(s: &Shared, listener: &TcpListener) {
    for _ in 0..100_000 {
        let Ok((mut c, _)) = listener.accept() else {
            return;
        };
        let started = (SystemTime::now(), Instant::now());
        if c.set_nonblocking(true).is_err() {
            continue;
        }
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while buf.len() <= HEAD_MAX {
            match c.read(&mut chunk) {
                Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => break,
            }
        }
        if buf.is_empty() {
            continue;
        }
        let head = match memchr::memmem::find(&buf, b"\r\n\r\n") {
            Some(end) => &buf[..end + 4],
            None => &buf[..],
        };
        let (host, port) = match parse_ask(head) {
            Ok(a) => (a.host, a.port),
            Err(named) => named,
        };
        let seq = s.next_id.fetch_add(1, Ordering::SeqCst);
        record(
            s,
            seq,
            attempt(&host, port, started),
            "run_ended_before_served",
        );
    }
}

fn attempt(host: &str, port: u16, started: (SystemTime, Instant)) -> Connection {
    Connection {
        host: host.to_string(),
        port,
        address: None,
        decision: NetDecision::Denied,
        reason: None,
        bytes_sent: 0,
        bytes_received: 0,
        started_at: humantime::format_rfc3339_millis(started.0).to_string(),
        duration_ms: started.1.elapsed().as_millis() as u64,
    }
}

/// Record a denied attempt with its reason.
fn record(s: &Shared, seq: u64, mut c: Connection, reason: &str) {
    c.decision = NetDecision::Denied;
    c.reason = Some(reason.to_string());
    push(s, seq, c);
}

/// Keep the attempt if it is among the first [`MAX_RECORDED`] accepted;
/// once, whoever records it first (its worker, or `stop` for a worker that
/// did not end in time).
fn push(s: &Shared, seq: u64, c: Connection) {
    let mut log = lock(&s.log);
    log.inflight.remove(&seq);
    if !log.cut.contains(&seq) {
        keep(&mut log, seq, c);
    }
}

fn keep(log: &mut Log, seq: u64, c: Connection) {
    if seq < MAX_RECORDED as u64 {
        log.connections.push((seq, c));
    } else {
        log.omitted += 1;
    }
}

fn response(code: u16, text: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {code} {text}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// What the child asked for.
struct Ask {
    host: String,
    port: u16,
    /// `None` for CONNECT; else the head to send upstream (origin-form).
    forward: Option<Vec<u8>>,
    /// The request body's length (`Content-Length`, 0 without one): exactly
    /// that many bytes follow the head upstream, and nothing after them.
    body_len: u64,
}

/// Read the request head: its bytes and whatever followed it; `Err(true)`
/// when something was sent but no whole head within the bounds (size,
/// time), `Err(false)` when the connection closed having sent nothing.
fn read_head(c: &mut TcpStream) -> Result<(Vec<u8>, Vec<u8>), bool> {
    c.set_read_timeout(Some(HEAD_TIMEOUT)).map_err(|_| false)?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = match c.read(&mut chunk) {
            Ok(0) | Err(_) => return Err(!buf.is_empty()),
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = memchr::memmem::find(&buf, b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            c.set_read_timeout(None).map_err(|_| true)?;
            return Ok((buf, rest));
        }
        if buf.len() > HEAD_MAX {
            return Err(true);
        }
    }
}

/// Parse a request head into what it asks for; `Err((host, port))` names
/// what could be read of a request this proxy does not serve.
fn parse_ask(head: &[u8]) -> Result<Ask, (String, u16)> {
    let text = std::str::from_utf8(head).map_err(|_| (String::new(), 0))?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut words = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err((String::new(), 0));
    };
    if !version.starts_with("HTTP/1.") {
        return Err((String::new(), 0));
    }
    if method == "CONNECT" {
        let (host, port) = split_authority(target, None).ok_or((String::new(), 0))?;
        return Ok(Ask {
            host,
            port,
            forward: None,
            body_len: 0,
        });
    }
    let lower = target.to_ascii_lowercase();
    let Some(after) = lower.strip_prefix("http://").map(|_| &target[7..]) else {
        return Err((String::new(), 0));
    };
    let split = after.find(['/', '?']).unwrap_or(after.len());
    let (authority, path) = after.split_at(split);
    let (host, port) = split_authority(authority, Some(80)).ok_or((String::new(), 0))?;
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    // The request goes to exactly the authority the lease allowed: the
    // child's own `Host` is replaced by it (RFC 9112 §3.2.2), and a head the
    // upstream could read differently from this proxy (a bare CR or LF in a
    // line, a folded line, a chunked or doubly sized body) is refused, so no
    // second request can ride behind the first.
    let bad = || (host.clone(), port);
    let mut out = format!("{method} {path} {version}\r\n");
    out.push_str(&format!(
        "Host: {}\r\n",
        if port == 80 {
            host.clone()
        } else {
            format!("{host}:{port}")
        }
    ));
    let mut body_len: Option<u64> = None;
    for h in lines.filter(|l| !l.is_empty()) {
        if h.contains(['\r', '\n']) || h.starts_with([' ', '\t']) || !h.contains(':') {
            return Err(bad());
        }
        let (name, value) = h.split_once(':').ok_or_else(bad)?;
        let name = name.trim().to_ascii_lowercase();
        if name.is_empty() || name.contains([' ', '\t']) {
            return Err(bad());
        }
        match name.as_str() {
            "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive" | "host" => {
                continue
            }
            "transfer-encoding" => return Err(bad()),
            "content-length" => {
                let n: u64 = value.trim().parse().map_err(|_| bad())?;
                if body_len.is_some_and(|m| m != n) {
                    return Err(bad());
                }
                body_len = Some(n);
            }
            _ => {}
        }
        out.push_str(h);
        out.push_str("\r\n");
    }
    // One request per upstream connection: the next one on the child's
    // connection could name another host.
    out.push_str("Connection: close\r\n\r\n");
    Ok(Ask {
        host,
        port,
        forward: Some(out.into_bytes()),
        body_len: body_len.unwrap_or(0),
    })
}

/// `host:port` (IPv6 in brackets), the port required unless `default`.
fn split_authority(a: &str, default: Option<u16>) -> Option<(String, u16)> {
    if a.contains('@') {
        return None;
    }
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        let (ip, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default?,
            None => return None,
        };
        (
            format!("[{}]", ip.parse::<std::net::Ipv6Addr>().ok()?),
            port,
        )
    } else {
        let (h, port) = match a.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().ok()?),
            None => (a, default?),
        };
        // Only a plain DNS name or IPv4 literal is a host: anything else
        // is a bad request, and never reaches the receipt as a host.
        match parse_host(h)? {
            AllowHost::Name(n) => (n, port),
            AllowHost::Ip(ip) => (ip.to_string(), port),
        }
    };
    (port != 0).then_some((host, port))
}

/// The allowlist entry `host:port` is, if any.
fn entry_of(allow: &[Allow], host: &str, port: u16) -> Option<usize> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let asked = match bare.parse::<IpAddr>() {
        Ok(ip) => AllowHost::Ip(ip),
        Err(_) => parse_host(bare)?,
    };
    allow.iter().position(|a| a.port == port && a.host == asked)
}

fn handle(s: &Arc<Shared>, id: u64, mut client: TcpStream, started: (SystemTime, Instant)) {
    if let Ok(c) = client.try_clone() {
        lock(&s.open).insert(id, vec![c]);
    }
    serve(s, id, &mut client, started);
    lock(&s.open).remove(&id);
}

fn serve(s: &Arc<Shared>, id: u64, client: &mut TcpStream, started: (SystemTime, Instant)) {
    let parsed = read_head(client)
        .map_err(|sent| (sent, (String::new(), 0)))
        .and_then(|(head, rest)| {
            parse_ask(&head)
                .map(|ask| (ask, rest))
                .map_err(|what| (true, what))
        });
    let (ask, rest) = match parsed {
        Ok(a) => a,
        // Closed having sent nothing: nothing was asked.
        Err((false, _)) => return,
        Err((true, (host, port))) => {
            let _ = client.write_all(&response(
                400,
                "Bad Request",
                "governed-exec: the egress proxy serves CONNECT host:port and absolute-form http:// requests only\n",
            ));
            record(s, id, attempt(&host, port, started), "bad_request");
            return;
        }
    };
    let mut conn = attempt(&ask.host, ask.port, started);
    let deny = |client: &mut TcpStream,
                mut conn: Connection,
                code: u16,
                text: &str,
                body: String,
                why: &str| {
        let _ = client.write_all(&response(code, text, &body));
        conn.duration_ms = started.1.elapsed().as_millis() as u64;
        record(s, id, conn, why);
    };
    let target = format!("{}:{}", ask.host, ask.port);
    let Some(entry) = entry_of(&s.allow, &ask.host, ask.port) else {
        let body = format!("governed-exec: {target} is not in this lease's network allowlist; the approver can add it with --allow-net {target}\n");
        return deny(client, conn, 403, "Forbidden", body, "not_in_allowlist");
    };
    // From here until it is relayed or refused, the run's end cuts it and
    // records it so: an allowed connection, `run_ended`.
    let cut = |mut conn: Connection| {
        conn.decision = NetDecision::Allowed;
        conn.reason = Some(RUN_ENDED.into());
        conn.duration_ms = started.1.elapsed().as_millis() as u64;
        lock(&s.log).used[entry] = true;
        push(s, id, conn);
    };
    {
        let mut pending = conn.clone();
        pending.decision = NetDecision::Allowed;
        pending.reason = Some(RUN_ENDED.into());
        lock(&s.log)
            .inflight
            .insert(id, (pending, started.1, entry));
    }
    // Resolve (or take the literal), then keep what may be dialled.
    let bare = ask.host.trim_start_matches('[').trim_end_matches(']');
    let addrs = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => match resolve::resolve(bare, &s.hosts, &s.resolv, Some(s.stop_r.as_fd())) {
            Ok(a) => a,
            Err(resolve::ResolveError::Stopped(_)) => return cut(conn),
            Err(e) => {
                let body = format!("governed-exec: cannot resolve {}: {e}\n", ask.host);
                return deny(client, conn, 502, "Bad Gateway", body, "resolution_failed");
            }
        },
    };
    let (dialable, refused) = dialable_addrs(s, ask.port, &addrs);
    if dialable.is_empty() {
        let (why, ip) = refused.unwrap_or(("resolution_failed", IpAddr::from([0u8; 4])));
        let lit = match ip {
            IpAddr::V4(a) => format!("{a}:{}", ask.port),
            IpAddr::V6(a) => format!("[{a}]:{}", ask.port),
        };
        let body = format!("governed-exec: {target} resolves to {ip}, a {} the proxy does not dial through a name; the approver can allow that address with --allow-net {lit}\n", why.replace('_', " "));
        return deny(client, conn, 403, "Forbidden", body, why);
    }
    let (up, ip) = match dial(&dialable, ask.port, s.stop_r.as_fd()) {
        Ok(u) => u,
        Err(DialError::Stopped { ip }) => {
            conn.address = Some(ip.to_string());
            return cut(conn);
        }
        Err(last_err) => {
            conn.decision = NetDecision::Allowed;
            conn.reason = Some("connect_failed".into());
            conn.address = dialable.first().map(|i| i.to_string());
            let _ = client.write_all(&response(
                502,
                "Bad Gateway",
                &format!("governed-exec: cannot connect to {target}: {last_err}\n"),
            ));
            conn.duration_ms = started.1.elapsed().as_millis() as u64;
            lock(&s.log).used[entry] = true;
            return push(s, id, conn);
        }
    };
    conn.decision = NetDecision::Allowed;
    conn.address = Some(ip.to_string());
    {
        let mut log = lock(&s.log);
        log.used[entry] = true;
        if let Some((pending, _, _)) = log.inflight.get_mut(&id) {
            pending.address = conn.address.clone();
        }
    }
    relay_allowed(s, id, client, up, &ask, &rest, &mut conn);
    conn.duration_ms = started.1.elapsed().as_millis() as u64;
    push(s, id, conn);
}

/// The addresses the proxy may dial for `port`: each one `resolve::refusal`
/// lets through, or that the allowlist names as an IP literal; and the first
/// refused one, with why, for the answer when none is left.
fn dialable_addrs(
    s: &Shared,
    port: u16,
    addrs: &[IpAddr],
) -> (Vec<IpAddr>, Option<(&'static str, IpAddr)>) {
    let own = lock(&s.own).clone();
    let mut refused = None;
    let dialable: Vec<IpAddr> = addrs
        .iter()
        .copied()
        .filter(|ip| {
            let listed = s
                .allow
                .iter()
                .any(|a| a.port == port && a.host == AllowHost::Ip(*ip));
            match resolve::refusal(*ip, &own) {
                Some(why) if !listed => {
                    refused.get_or_insert((why, *ip));
                    false
                }
                _ => true,
            }
        })
        .collect();
    (dialable, refused)
}

/// Why no address of an allowed entry could be dialled: the last
/// address's error (the proxy's 502 answer and the `connect_failed`
/// connection of the receipt).
#[derive(Debug, thiserror::Error)]
enum DialError {
    #[error("{ip}: {source}")]
    Connect {
        ip: IpAddr,
        #[source]
        source: std::io::Error,
    },
    /// No address at all: never reached, `serve` answers an empty list
    /// (every address refused) before it dials.
    #[error("no address to dial")]
    NoAddress,
    /// The connection's whole dial budget went before any address answered.
    #[error("no address answered within {}s", DIAL_BUDGET.as_secs())]
    Budget,
    /// The run ended while `ip` was being dialled.
    #[error("{ip}: the run ended")]
    Stopped { ip: IpAddr },
}

/// Dial each address in turn, all of them within one [`DIAL_BUDGET`] and
/// each within [`DIAL_ATTEMPT`] of it: the first that answers, or the last
/// error. A dial ends at once when `stop` is readable (the run is over).
fn dial(
    addrs: &[IpAddr],
    port: u16,
    stop: std::os::fd::BorrowedFd<'_>,
) -> Result<(TcpStream, IpAddr), DialError> {
    let deadline = Instant::now() + DIAL_BUDGET;
    let mut last_err = DialError::NoAddress;
    for ip in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            if matches!(last_err, DialError::NoAddress) {
                last_err = DialError::Budget;
            }
            break;
        }
        let until = Instant::now() + left.min(DIAL_ATTEMPT);
        match connect_until(SocketAddr::new(*ip, port), until, stop) {
            Ok(u) => return Ok((u, *ip)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                return Err(DialError::Stopped { ip: *ip })
            }
            Err(source) => last_err = DialError::Connect { ip: *ip, source },
        }
    }
    Err(last_err)
}

/// A non-blocking connect waited for until `until` (`TimedOut`) or until
/// `stop` is readable (`Interrupted`); the stream is blocking again.
fn connect_until(
    addr: SocketAddr,
    until: Instant,
    stop: std::os::fd::BorrowedFd<'_>,
) -> std::io::Result<TcpStream> {
    use nix::sys::socket::{
        connect, getsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage,
    };
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(
        family,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    match connect(fd.as_raw_fd(), &SockaddrStorage::from(addr)) {
        Ok(()) => {}
        Err(nix::errno::Errno::EINPROGRESS) => {
            resolve::wait_for(fd.as_fd(), PollFlags::POLLOUT, until, Some(stop))?;
            let err = getsockopt(&fd, sockopt::SocketError)?;
            if err != 0 {
                return Err(std::io::Error::from_raw_os_error(err));
            }
        }
        Err(e) => return Err(e.into()),
    }
    let stream = TcpStream::from(fd);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// An allowed connection, dialled: the 200 (CONNECT) or the request's head
/// upstream, the bytes already read past the head, then both ways until
/// done; the bytes each way go on `conn`.
fn relay_allowed(
    s: &Shared,
    id: u64,
    client: &mut TcpStream,
    mut up: TcpStream,
    ask: &Ask,
    rest: &[u8],
    conn: &mut Connection,
) {
    if let Ok(u) = up.try_clone() {
        if let Some(v) = lock(&s.open).get_mut(&id) {
            v.push(u);
        }
    }
    if s.stopping.load(Ordering::SeqCst) {
        let _ = up.shutdown(Shutdown::Both);
    }
    let _ = up.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let (opened, head_sent) = match &ask.forward {
        None => (
            client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n"),
            0,
        ),
        Some(h) => (up.write_all(h), h.len() as u64),
    };
    // A plain request's body is exactly its Content-Length: bytes past it
    // (a pipelined second request) are never sent upstream.
    let rest: &[u8] = match ask.forward {
        Some(_) => {
            &rest[..rest
                .len()
                .min(usize::try_from(ask.body_len).unwrap_or(usize::MAX))]
        }
        None => rest,
    };
    let sent_first = if opened.is_ok() && !rest.is_empty() {
        up.write_all(rest).map(|()| rest.len() as u64).unwrap_or(0)
    } else {
        0
    };
    if opened.is_ok() {
        let (sent, received) = match ask.forward {
            None => relay(client, up),
            Some(_) => relay_request(client, up, ask.body_len.saturating_sub(sent_first)),
        };
        conn.bytes_sent = head_sent + sent_first + sent;
        conn.bytes_received = received;
    }
}

/// Copy both ways until both sides are done: (child → host, host → child).
fn relay(client: &TcpStream, up: TcpStream) -> (u64, u64) {
    let (Ok(c_read), Ok(c_write), Ok(u_read)) =
        (client.try_clone(), client.try_clone(), up.try_clone())
    else {
        return (0, 0);
    };
    let back = std::thread::Builder::new()
        .name("egress-relay".into())
        .spawn(move || copy(u_read, c_write));
    let sent = copy(c_read, up);
    let received = match back {
        Ok(h) => h.join().unwrap_or(0),
        Err(_) => 0,
    };
    (sent, received)
}

/// A plain-HTTP request: `body_left` more bytes of body from the child,
/// then the upstream's write side is closed; the answer is copied back
/// until the upstream closes. Nothing else the child sends goes upstream.
fn relay_request(client: &TcpStream, up: TcpStream, body_left: u64) -> (u64, u64) {
    let (Ok(c_read), Ok(c_write), Ok(u_read)) =
        (client.try_clone(), client.try_clone(), up.try_clone())
    else {
        return (0, 0);
    };
    let back = std::thread::Builder::new()
        .name("egress-relay".into())
        .spawn(move || copy(u_read, c_write));
    let mut sent = 0u64;
    let mut up_w = &up;
    let mut buf = vec![0u8; 64 * 1024];
    let mut from = &c_read;
    while sent < body_left {
        let want = usize::try_from(body_left - sent)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        match from.read(&mut buf[..want]) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if up_w.write_all(&buf[..n]).is_err() {
                    break;
                }
                sent += n as u64;
            }
        }
    }
    let _ = up.shutdown(Shutdown::Write);
    let received = match back {
        Ok(h) => h.join().unwrap_or(0),
        Err(_) => 0,
    };
    (sent, received)
}

/// One direction until EOF or error, then half-close the writer: spliced
/// through a pipe (the payload never enters user space), or read and
/// written where splice is refused.
fn copy(from: TcpStream, to: TcpStream) -> u64 {
    let total = match splice_copy(&from, &to) {
        Ok(n) => n,
        Err(SpliceStop::Unsupported) => read_write_copy(&from, &to),
        Err(SpliceStop::Ended(n)) => n,
    };
    let _ = to.shutdown(Shutdown::Write);
    total
}

enum SpliceStop {
    /// splice(2) does not take these fds: nothing was moved yet.
    Unsupported,
    /// An error after `n` bytes: the connection is over.
    Ended(u64),
}

fn splice_copy(from: &TcpStream, to: &TcpStream) -> Result<u64, SpliceStop> {
    use nix::errno::Errno;
    use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
    let (pr, pw) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|_| SpliceStop::Unsupported)?;
    // A bigger pipe moves more per call; the default (64 KiB) where refused.
    let _ = fcntl(pw.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(COPY_BUF as i32 * 8));
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_MORE;
    let mut total = 0u64;
    loop {
        let n = match splice(from, None, &pw, None, COPY_BUF * 8, flags) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(Errno::EINVAL | Errno::ENOSYS) if total == 0 => {
                return Err(SpliceStop::Unsupported)
            }
            Err(_) => return Err(SpliceStop::Ended(total)),
        };
        let mut left = n;
        while left > 0 {
            match splice(&pr, None, to, None, left, flags) {
                Ok(0) => return Err(SpliceStop::Ended(total)),
                Ok(m) => left -= m,
                Err(Errno::EINTR) => {}
                Err(_) => {
                    let _ = from.shutdown(Shutdown::Read);
                    return Err(SpliceStop::Ended(total + (n - left) as u64));
                }
            }
        }
        total += n as u64;
    }
}

fn read_write_copy(mut from: &TcpStream, mut to: &TcpStream) -> u64 {
    let mut buf = vec![0u8; COPY_BUF];
    let mut total = 0u64;
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    let _ = from.shutdown(Shutdown::Read);
                    break;
                }
                total += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_canonical_and_wildcards_refused() {
        let c = |s: &str| Allow::parse(s).map(|a| a.canonical());
        assert_eq!(c("PyPI.org").unwrap(), "pypi.org:443");
        assert_eq!(c("index.crates.io:8443").unwrap(), "index.crates.io:8443");
        assert_eq!(c("10.0.0.5:80").unwrap(), "10.0.0.5:80");
        assert_eq!(c("2001:db8::1").unwrap(), "[2001:db8::1]:443");
        assert_eq!(c("[2001:DB8::1]:8443").unwrap(), "[2001:db8::1]:8443");
        for bad in [
            "*.pypi.org",
            "pypi.org:0",
            "pypi.org:+1",
            "pypi.org:65536",
            "",
            "a b",
            "-x.org",
            "x..org",
            "010.0.0.1",
            "user@host",
            "[::1",
            "[::1]x",
        ] {
            assert!(Allow::parse(bad).is_err(), "{bad:?}");
        }
    }

    /// The upstream gets exactly the allowed authority as `Host`, and a head
    /// it could read differently from the proxy is refused.
    #[test]
    fn a_plain_request_carries_the_allowed_host_and_nothing_ambiguous() {
        let a = parse_ask(
            b"GET http://web.test:8080/x HTTP/1.1\r\nHost: evil.test\r\nContent-Length: 3\r\n\r\n",
        )
        .ok()
        .unwrap();
        let head = String::from_utf8(a.forward.unwrap()).unwrap();
        assert!(
            head.starts_with("GET /x HTTP/1.1\r\nHost: web.test:8080\r\n"),
            "{head}"
        );
        assert!(!head.contains("evil.test"), "{head}");
        assert_eq!(a.body_len, 3);
        for bad in [
            &b"GET http://web.test/ HTTP/1.1\r\nX-A: b\nConnection: keep-alive\r\n\r\n"[..],
            b"GET http://web.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET http://web.test/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"GET http://web.test/ HTTP/1.1\r\n folded\r\n\r\n",
            b"GET http://web.test/ HTTP/1.1\r\nno-colon\r\n\r\n",
        ] {
            assert!(parse_ask(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn requests_are_read_as_connect_or_absolute_form_only() {
        let a = parse_ask(b"CONNECT PyPI.org:443 HTTP/1.1\r\nHost: x\r\n\r\n")
            .ok()
            .unwrap();
        assert_eq!(
            (a.host.as_str(), a.port, a.forward.is_none()),
            ("pypi.org", 443, true)
        );
        let a = parse_ask(
            b"GET http://Web.Test/p?q=1 HTTP/1.1\r\nHost: web.test\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .ok()
        .unwrap();
        assert_eq!((a.host.as_str(), a.port), ("web.test", 80));
        assert_eq!(
            String::from_utf8(a.forward.unwrap()).unwrap(),
            "GET /p?q=1 HTTP/1.1\r\nHost: web.test\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let a = parse_ask(b"GET http://[::1]:8080 HTTP/1.0\r\n\r\n")
            .ok()
            .unwrap();
        assert_eq!((a.host.as_str(), a.port), ("[::1]", 8080));
        for bad in [
            &b"GET /relative HTTP/1.1\r\n\r\n"[..],
            b"GET https://x.org/ HTTP/1.1\r\n\r\n",
            b"CONNECT x.org HTTP/1.1\r\n\r\n",
            b"CONNECT user@x.org:443 HTTP/1.1\r\n\r\n",
            b"GET http://x.org/ SPDY/3\r\n\r\n",
            b"GET  http://x.org/ HTTP/1.1\r\n\r\n",
            b"CONNECT <b>x</b>:443 HTTP/1.1\r\n\r\n",
            b"GET http://x|y.org/ HTTP/1.1\r\n\r\n",
        ] {
            assert!(parse_ask(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_request_matches_only_its_exact_entry() {
        let allow: Vec<Allow> = ["pypi.org", "10.0.0.5:8080", "[2001:db8::1]:443"]
            .iter()
            .map(|a| Allow::parse(a).unwrap())
            .collect();
        assert_eq!(entry_of(&allow, "pypi.org", 443), Some(0));
        assert_eq!(entry_of(&allow, "pypi.org", 80), None);
        assert_eq!(entry_of(&allow, "evil.pypi.org", 443), None);
        assert_eq!(entry_of(&allow, "pypi.org.", 443), None);
        assert_eq!(entry_of(&allow, "10.0.0.5", 8080), Some(1));
        assert_eq!(entry_of(&allow, "[2001:db8:0::1]", 443), Some(2));
        assert_eq!(entry_of(&allow, "2001:db8::1", 443), Some(2));
    }
}
