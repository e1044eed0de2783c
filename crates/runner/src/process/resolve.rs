//! Name resolution for the egress proxy, without NSS (CONTRACT §8).
//!
//! The release binary is a static glibc build that must call no NSS
//! function (`getaddrinfo` would `dlopen` NSS modules), so the proxy
//! resolves names the way glibc's default `hosts: files dns` does, by hand:
//! every line of `/etc/hosts` that names the host (case-insensitive, canonical
//! name or alias), and only when none does, A and AAAA queries over UDP to
//! the `nameserver`s of `/etc/resolv.conf` (at most three, glibc's MAXNS; the
//! loopback resolver when none is named), honouring `options timeout:N
//! attempts:N`. Names are looked up exactly as written: no search list, as
//! the allowlist holds exact names.
//!
//! Which addresses may then be dialled is [`refusal`]'s decision.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// The most one name's resolution may take, however many nameservers and
/// attempts resolv.conf names: the proxy's workers must end soon after the
/// run (the receipt waits for them).
pub(crate) const BUDGET: Duration = Duration::from_secs(10);

/// Why a name gave no address.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{0} does not exist (NXDOMAIN)")]
    NoSuchName(String),
    #[error("{0} has no A or AAAA record")]
    NoAddress(String),
    #[error("no nameserver answered for {name}: {why}")]
    NoAnswer { name: String, why: String },
    /// The run ended while the name was being resolved.
    #[error("the run ended while {0} was being resolved")]
    Stopped(String),
}

/// The resolver settings read from `/etc/resolv.conf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvConf {
    pub nameservers: Vec<IpAddr>,
    pub timeout: Duration,
    pub attempts: u32,
}

impl ResolvConf {
    /// Parse the text of a resolv.conf as glibc does (the last `options`
    /// win, comments start with `#` or `;`).
    pub fn parse(text: &str) -> ResolvConf {
        let mut conf = ResolvConf {
            nameservers: Vec::new(),
            timeout: Duration::from_secs(5),
            attempts: 2,
        };
        for line in text.lines() {
            let line = line.split(['#', ';']).next().unwrap_or("");
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => {
                    // A scoped IPv6 address (`fe80::1%eth0`) is left out:
                    // a link-local server is refused anyway.
                    if let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok()) {
                        if conf.nameservers.len() < 3 {
                            conf.nameservers.push(ip);
                        }
                    }
                }
                Some("options") => {
                    for w in words {
                        if let Some(n) = w.strip_prefix("timeout:").and_then(|n| n.parse().ok()) {
                            conf.timeout = Duration::from_secs(u64::clamp(n, 1, 30));
                        }
                        if let Some(n) = w.strip_prefix("attempts:").and_then(|n| n.parse().ok()) {
                            conf.attempts = u32::clamp(n, 1, 5);
                        }
                    }
                }
                _ => {}
            }
        }
        if conf.nameservers.is_empty() {
            conf.nameservers.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        conf
    }
}

/// Every address `/etc/hosts` (its text) gives `name`, in file order.
pub(crate) fn from_hosts(text: &str, name: &str) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok()) else {
            continue;
        };
        if words.any(|w| w.eq_ignore_ascii_case(name)) && !out.contains(&ip) {
            out.push(ip);
        }
    }
    out
}

/// Resolve `name` from the texts of `/etc/hosts` and `/etc/resolv.conf`.
/// Waiting for a nameserver ends at once when `stop` becomes readable (the
/// run is over): nothing a resolution waits for can hold the runner.
pub fn resolve(
    name: &str,
    hosts: &str,
    resolv: &str,
    stop: Option<BorrowedFd<'_>>,
) -> Result<Vec<IpAddr>, ResolveError> {
    let listed = from_hosts(hosts, name);
    if !listed.is_empty() {
        return Ok(listed);
    }
    let conf = ResolvConf::parse(resolv);
    let deadline = Instant::now() + BUDGET;
    let mut out = Vec::new();
    let mut last = None;
    for qtype in [QTYPE_A, QTYPE_AAAA] {
        match query_all(&conf, name, qtype, deadline, stop) {
            Ok(addrs) => out.extend(addrs),
            Err(e @ ResolveError::Stopped(_)) => return Err(e),
            Err(e) => last = Some(e),
        }
    }
    if !out.is_empty() {
        return Ok(out);
    }
    Err(last.unwrap_or_else(|| ResolveError::NoAddress(name.to_string())))
}

const QTYPE_A: u16 = 1;
const QTYPE_AAAA: u16 = 28;

fn query_all(
    conf: &ResolvConf,
    name: &str,
    qtype: u16,
    deadline: Instant,
    stop: Option<BorrowedFd<'_>>,
) -> Result<Vec<IpAddr>, ResolveError> {
    let mut why = String::from("no nameserver");
    for _ in 0..conf.attempts {
        for ns in &conf.nameservers {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ResolveError::NoAnswer {
                    name: name.to_string(),
                    why: format!("{why}; gave up after {}s", BUDGET.as_secs()),
                });
            }
            match query(*ns, conf.timeout.min(left), name, qtype, stop) {
                Ok(Answer::Addresses(a)) if a.is_empty() => {
                    return Err(ResolveError::NoAddress(name.to_string()))
                }
                Ok(Answer::Addresses(a)) => return Ok(a),
                Ok(Answer::NxDomain) => return Err(ResolveError::NoSuchName(name.to_string())),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                    return Err(ResolveError::Stopped(name.to_string()))
                }
                Err(e) => why = format!("{ns}: {e}"),
            }
        }
    }
    Err(ResolveError::NoAnswer {
        name: name.to_string(),
        why,
    })
}

#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    Addresses(Vec<IpAddr>),
    NxDomain,
}

/// One query to `ns`; `Interrupted` when `stop` became readable first.
fn query(
    ns: IpAddr,
    timeout: Duration,
    name: &str,
    qtype: u16,
    stop: Option<BorrowedFd<'_>>,
) -> std::io::Result<Answer> {
    let mut id = [0u8; 2];
    getrandom::fill(&mut id).map_err(|e| std::io::Error::other(e.to_string()))?;
    let id = u16::from_be_bytes(id);
    let packet = encode_query(id, name, qtype)
        .ok_or_else(|| std::io::Error::other("the name cannot be put in a DNS query"))?;
    let bind: SocketAddr = match ns {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let sock = UdpSocket::bind(bind)?;
    sock.connect((ns, 53))?;
    sock.set_nonblocking(true)?;
    sock.send(&packet)?;
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 1500];
    loop {
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                wait_readable(sock.as_fd(), deadline, stop)?;
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        // A stray or forged datagram (wrong id or question) is skipped.
        if let Some(answer) = decode_answer(&buf[..n], id, &packet[12..], qtype) {
            return Ok(answer);
        }
    }
}

/// A recursive query for `name` (exact, no search list).
pub(crate) fn encode_query(id: u16, name: &str, qtype: u16) -> Option<Vec<u8>> {
    let mut p = Vec::with_capacity(name.len() + 18);
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return None;
        }
        p.push(label.len() as u8);
        p.extend_from_slice(label.as_bytes());
    }
    p.push(0);
    p.extend_from_slice(&qtype.to_be_bytes());
    p.extend_from_slice(&1u16.to_be_bytes());
    (p.len() <= 512).then_some(p)
}

/// The addresses of type `qtype` in a response to the query with this id
/// and question; `None` when it is not that response or is malformed.
pub(crate) fn decode_answer(msg: &[u8], id: u16, question: &[u8], qtype: u16) -> Option<Answer> {
    if msg.len() < 12 || u16::from_be_bytes([msg[0], msg[1]]) != id || msg[2] & 0x80 == 0 {
        return None;
    }
    let rcode = msg[3] & 0x0f;
    let qd = u16::from_be_bytes([msg[4], msg[5]]);
    let an = u16::from_be_bytes([msg[6], msg[7]]);
    if qd != 1 || !msg[12..].starts_with(question) {
        return None;
    }
    if rcode == 3 {
        return Some(Answer::NxDomain);
    }
    if rcode != 0 {
        return None;
    }
    let mut at = 12 + question.len();
    let mut out = Vec::new();
    for _ in 0..an {
        at = skip_name(msg, at)?;
        let head = msg.get(at..at + 10)?;
        let rtype = u16::from_be_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_be_bytes([head[8], head[9]]));
        let data = msg.get(at + 10..at + 10 + len)?;
        at += 10 + len;
        match (rtype, len) {
            (QTYPE_A, 4) if qtype == QTYPE_A => out.push(IpAddr::V4(Ipv4Addr::new(
                data[0], data[1], data[2], data[3],
            ))),
            (QTYPE_AAAA, 16) if qtype == QTYPE_AAAA => {
                let mut b = [0u8; 16];
                b.copy_from_slice(data);
                out.push(IpAddr::V6(Ipv6Addr::from(b)));
            }
            // CNAMEs and anything else: the recursive server already
            // followed the chain and put the addresses in this answer.
            _ => {}
        }
    }
    Some(Answer::Addresses(out))
}

fn skip_name(msg: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *msg.get(at)?;
        match len {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => return Some(at + 2),
            l => at += 1 + usize::from(l),
        }
    }
}

/// Wait until `fd` is ready for `POLLIN` before `deadline`: `TimedOut`
/// after it, `Interrupted` as soon as `stop` is readable.
fn wait_readable(
    fd: BorrowedFd<'_>,
    deadline: Instant,
    stop: Option<BorrowedFd<'_>>,
) -> std::io::Result<()> {
    wait_for(fd, PollFlags::POLLIN, deadline, stop)
}

/// Wait for `events` on `fd` before `deadline`, or until `stop` (a pipe the
/// proxy writes to when the run is over) is readable.
pub(crate) fn wait_for(
    fd: BorrowedFd<'_>,
    events: PollFlags,
    deadline: Instant,
    stop: Option<BorrowedFd<'_>>,
) -> std::io::Result<()> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
        let mut fds = vec![PollFd::new(fd, events)];
        if let Some(s) = stop {
            fds.push(PollFd::new(s, PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::from(ms)) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(0) => continue,
            Ok(_) => {}
        }
        if fds
            .get(1)
            .and_then(|f| f.revents())
            .is_some_and(|r| !r.is_empty())
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "the run ended",
            ));
        }
        if fds[0].revents().is_some_and(|r| !r.is_empty()) {
            return Ok(());
        }
    }
}

/// Why the proxy will not dial `ip` on its own say-so (a name resolving
/// there): loopback, link-local, private (RFC 1918, ULA, shared address
/// space), not unicast, or one of the runner's own addresses. `None`: it may
/// be dialled. An allowlist entry naming the IP literal overrides this.
pub fn refusal(ip: IpAddr, own: &[IpAddr]) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let (loopback, link_local, private, not_unicast) = match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            (
                a.is_loopback(),
                a.is_link_local(),
                a.is_private() || (o[0] == 100 && o[1] & 0xc0 == 64),
                a.is_unspecified() || a.is_broadcast() || a.is_multicast() || o[0] == 0,
            )
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            (
                a.is_loopback(),
                s[0] & 0xffc0 == 0xfe80,
                s[0] & 0xfe00 == 0xfc00,
                a.is_unspecified() || a.is_multicast(),
            )
        }
    };
    if loopback {
        Some("loopback_address")
    } else if link_local {
        Some("link_local_address")
    } else if own.contains(&ip) {
        Some("runner_address")
    } else if private {
        Some("private_address")
    } else if not_unicast {
        Some("not_unicast_address")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_lines_match_names_and_aliases_case_insensitively_in_order() {
        let hosts = "127.0.0.1 localhost\n# 10.0.0.9 web.test\n10.0.0.2  Web.Test web # c\n\
                     ::1 ip6-localhost\nbogus web.test\n10.0.0.3 other web.test\n";
        let got = from_hosts(hosts, "web.test");
        assert_eq!(
            got,
            vec![
                "10.0.0.2".parse::<IpAddr>().unwrap(),
                "10.0.0.3".parse().unwrap()
            ]
        );
        assert_eq!(
            from_hosts(hosts, "WEB"),
            vec!["10.0.0.2".parse::<IpAddr>().unwrap()]
        );
        assert!(from_hosts(hosts, "nope.test").is_empty());
    }

    #[test]
    fn resolv_conf_keeps_three_nameservers_and_options() {
        let c = ResolvConf::parse(
            "nameserver 192.0.2.1\nnameserver 192.0.2.2 ; x\nnameserver 2001:db8::1\nnameserver 192.0.2.4\noptions timeout:2 attempts:9\n",
        );
        assert_eq!(c.nameservers.len(), 3);
        assert_eq!(c.timeout, Duration::from_secs(2));
        assert_eq!(c.attempts, 5);
        assert_eq!(
            ResolvConf::parse("").nameservers,
            vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]
        );
    }

    #[test]
    fn a_response_is_decoded_and_a_foreign_one_ignored() {
        let q = encode_query(0x1234, "pypi.org", QTYPE_A).unwrap();
        let mut r = q.clone();
        r[2] = 0x81;
        r[3] = 0x80;
        r[7] = 2; // two answers: a CNAME then an A
        r.extend_from_slice(&[0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 2, 0xc0, 12]);
        r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 151, 101, 0, 223]);
        assert_eq!(
            decode_answer(&r, 0x1234, &q[12..], QTYPE_A),
            Some(Answer::Addresses(vec!["151.101.0.223".parse().unwrap()]))
        );
        assert_eq!(decode_answer(&r, 0x9999, &q[12..], QTYPE_A), None);
        let other = encode_query(0x1234, "evil.org", QTYPE_A).unwrap();
        assert_eq!(decode_answer(&r, 0x1234, &other[12..], QTYPE_A), None);
        let mut nx = q.clone();
        nx[2] = 0x81;
        nx[3] = 0x83;
        assert_eq!(
            decode_answer(&nx, 0x1234, &q[12..], QTYPE_A),
            Some(Answer::NxDomain)
        );
        // Truncated answer data is malformed, not an empty answer.
        let cut = &r[..r.len() - 2];
        assert_eq!(decode_answer(cut, 0x1234, &q[12..], QTYPE_A), None);
    }

    #[test]
    fn internal_addresses_are_refused_public_ones_not() {
        let own: Vec<IpAddr> = vec!["203.0.113.7".parse().unwrap(), "127.0.0.1".parse().unwrap()];
        for (ip, why) in [
            ("127.0.0.1", Some("loopback_address")),
            ("127.8.9.1", Some("loopback_address")),
            ("::1", Some("loopback_address")),
            ("::ffff:127.0.0.1", Some("loopback_address")),
            ("10.1.2.3", Some("private_address")),
            ("172.16.0.1", Some("private_address")),
            ("192.168.1.1", Some("private_address")),
            ("100.64.0.1", Some("private_address")),
            ("fd00::1", Some("private_address")),
            ("169.254.169.254", Some("link_local_address")),
            ("fe80::1", Some("link_local_address")),
            ("0.0.0.0", Some("not_unicast_address")),
            ("203.0.113.7", Some("runner_address")),
            ("151.101.0.223", None),
            ("2a04:4e42::223", None),
        ] {
            assert_eq!(refusal(ip.parse().unwrap(), &own), why, "{ip}");
        }
    }
}
