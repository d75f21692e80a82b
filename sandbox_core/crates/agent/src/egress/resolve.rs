//! The egress helper's resolver: names resolved over the outside's resolver configuration as it
//! was when the agent started (`Config::read`, before the fork), by DNS queries of its own.
//!
//! The helper keeps the outside's network namespace, so nothing a sandbox can write may steer
//! it: it never calls the C library's resolver (NSS loads modules named by `/etc/nsswitch.conf`
//! and reads `/etc/hosts` at each lookup, files that root inside a sandbox may write) and reads
//! no file after start. What it knows is the outside's `/etc/hosts` and `/etc/resolv.conf`
//! (nameservers, `search`, `ndots`, `timeout`, `attempts`) read once; a name is looked up in the
//! hosts table first, then as A and AAAA queries to each nameserver in turn (UDP, TCP when the
//! answer is truncated), with the search list applied as the C library does.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;
const HEADER: usize = 12;
/// What the C library asks of at most.
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCH: usize = 6;
const MAX_NAME: usize = 253;
/// Files larger than this are not a resolver's configuration; the rest is left out.
const MAX_FILE: u64 = 1 << 20;

/// The outside's resolver configuration, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    hosts: Vec<(String, IpAddr)>,
    nameservers: Vec<SocketAddr>,
    search: Vec<String>,
    ndots: usize,
    timeout: Duration,
    attempts: u32,
}

fn read_small(path: &str) -> String {
    let mut out = String::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(MAX_FILE).read_to_string(&mut out);
    }
    out
}

/// A host name as the resolver compares it: lower case, no trailing dot.
fn canonical(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl Config {
    /// The configuration of this process's file system (the outside's, at the agent's start).
    pub fn read() -> Config {
        Config::parse(&read_small("/etc/hosts"), &read_small("/etc/resolv.conf"))
    }

    /// The configuration `hosts` and `resolv` (the two files' text) give.
    pub fn parse(hosts: &str, resolv: &str) -> Config {
        let mut table = Vec::new();
        for line in hosts.lines() {
            let line = line.split('#').next().unwrap_or_default();
            let mut words = line.split_whitespace();
            let Some(Ok(ip)) = words.next().map(str::parse::<IpAddr>) else {
                continue;
            };
            for name in words {
                table.push((canonical(name), ip));
            }
        }
        let mut c = Config {
            hosts: table,
            nameservers: Vec::new(),
            search: Vec::new(),
            ndots: 1,
            timeout: Duration::from_secs(5),
            attempts: 2,
        };
        for line in resolv.lines() {
            let line = line.split(['#', ';']).next().unwrap_or_default();
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => {
                    if let Some(Ok(ip)) = words.next().map(str::parse::<IpAddr>) {
                        if c.nameservers.len() < MAX_NAMESERVERS {
                            c.nameservers.push(SocketAddr::new(ip, 53));
                        }
                    }
                }
                // The last of `search` and `domain` holds.
                Some("search") | Some("domain") => {
                    c.search = words
                        .map(canonical)
                        .filter(|d| !d.is_empty())
                        .take(MAX_SEARCH)
                        .collect();
                }
                Some("options") => {
                    for o in words {
                        let (k, v) = o.split_once(':').unwrap_or((o, ""));
                        let n = v.parse::<u32>().ok();
                        match (k, n) {
                            ("ndots", Some(n)) => c.ndots = n.min(15) as usize,
                            ("timeout", Some(n)) => {
                                c.timeout = Duration::from_secs(u64::from(n.clamp(1, 30)))
                            }
                            ("attempts", Some(n)) => c.attempts = n.clamp(1, 5),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        if c.nameservers.is_empty() {
            // The C library's default: a nameserver on this host.
            c.nameservers
                .push(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 53));
        }
        c
    }

    /// The names to ask for `name`, in order (the search list as the C library applies it).
    fn candidates(&self, name: &str) -> Vec<String> {
        if name.ends_with('.') || self.search.is_empty() {
            return vec![canonical(name)];
        }
        let name = canonical(name);
        let searched = self.search.iter().map(|d| format!("{name}.{d}"));
        if name.matches('.').count() >= self.ndots {
            std::iter::once(name.clone()).chain(searched).collect()
        } else {
            searched.chain(std::iter::once(name.clone())).collect()
        }
    }

    /// The addresses of `name`: the hosts table's, else the nameservers'.
    pub fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>> {
        let wanted = canonical(name);
        if wanted.is_empty() || wanted.len() > MAX_NAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a host name",
            ));
        }
        let listed: Vec<IpAddr> = self
            .hosts
            .iter()
            .filter(|(n, _)| *n == wanted)
            .map(|(_, ip)| *ip)
            .collect();
        if !listed.is_empty() {
            return Ok(listed);
        }
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no such name");
        for candidate in self.candidates(name) {
            match self.ask_all(&candidate) {
                Ok(found) if !found.is_empty() => return Ok(found),
                Ok(_) => {}
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// A and AAAA of `name` from the first nameserver that answers.
    fn ask_all(&self, name: &str) -> io::Result<Vec<IpAddr>> {
        let mut last = io::Error::new(io::ErrorKind::TimedOut, "no nameserver answered");
        for _ in 0..self.attempts {
            for server in &self.nameservers {
                let mut out = Vec::new();
                let mut answered = false;
                for qtype in [TYPE_A, TYPE_AAAA] {
                    match ask(*server, name, qtype, self.timeout) {
                        Ok(Answer::Found(ips)) => {
                            answered = true;
                            out.extend(ips);
                        }
                        Ok(Answer::NoSuchName) => {
                            return Ok(Vec::new());
                        }
                        Err(e) => last = e,
                    }
                }
                if answered {
                    return Ok(out);
                }
            }
        }
        Err(last)
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Found(Vec<IpAddr>),
    /// NXDOMAIN: the next name of the search list.
    NoSuchName,
}

fn random_id() -> u16 {
    let mut b = [0u8; 2];
    // SAFETY: getrandom into a buffer of the size we pass.
    let n = unsafe { libc::getrandom(b.as_mut_ptr() as *mut libc::c_void, b.len(), 0) };
    if n != 2 {
        // SAFETY: getpid has no preconditions; a predictable id is only a weaker check.
        return unsafe { libc::getpid() } as u16;
    }
    u16::from_be_bytes(b)
}

/// A query for `name`'s records of `qtype`, recursion desired.
pub fn query(id: u16, name: &str, qtype: u16) -> io::Result<Vec<u8>> {
    let mut m = Vec::with_capacity(HEADER + name.len() + 6);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a host name",
            ));
        }
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(m)
}

fn ask(server: SocketAddr, name: &str, qtype: u16, timeout: Duration) -> io::Result<Answer> {
    let id = random_id();
    let q = query(id, name, qtype)?;
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local)?;
    socket.connect(server)?;
    socket.set_read_timeout(Some(timeout))?;
    socket.send(&q)?;
    let mut buf = [0u8; 1500];
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let n = socket.recv(&mut buf)?;
        match parse_answer(&buf[..n], id, &q[HEADER..]) {
            Ok(Parsed::Truncated) => return ask_tcp(server, &q, timeout),
            Ok(Parsed::Done(a)) => return Ok(a),
            // Not the answer to this query (a stray or forged datagram): keep waiting.
            Err(_) if std::time::Instant::now() < deadline => continue,
            Err(e) => return Err(e),
        }
    }
}

fn ask_tcp(server: SocketAddr, q: &[u8], timeout: Duration) -> io::Result<Answer> {
    let mut s = TcpStream::connect_timeout(&server, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(q);
    s.write_all(&framed)?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len)?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut buf)?;
    let id = u16::from_be_bytes([q[0], q[1]]);
    match parse_answer(&buf, id, &q[HEADER..])? {
        Parsed::Done(a) => Ok(a),
        Parsed::Truncated => Err(bad("a truncated answer over TCP")),
    }
}

enum Parsed {
    Done(Answer),
    Truncated,
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Skips the name at `at` (labels, or a compression pointer that ends it).
fn skip_name(msg: &[u8], mut at: usize) -> io::Result<usize> {
    loop {
        let n = *msg.get(at).ok_or_else(|| bad("a name past the message"))?;
        match n {
            0 => return Ok(at + 1),
            n if n & 0xc0 == 0xc0 => return Ok(at + 2),
            n if n & 0xc0 == 0 => at += 1 + usize::from(n),
            _ => return Err(bad("a label of an unknown kind")),
        }
    }
}

/// The addresses of an answer to the query with `id` and `question`.
fn parse_answer(msg: &[u8], id: u16, question: &[u8]) -> io::Result<Parsed> {
    if msg.len() < HEADER {
        return Err(bad("a short answer"));
    }
    let word = |i: usize| u16::from_be_bytes([msg[i], msg[i + 1]]);
    if word(0) != id || word(2) & 0x8000 == 0 || word(4) != 1 {
        return Err(bad("not the answer to this query"));
    }
    let end = HEADER + question.len();
    if msg
        .get(HEADER..end)
        .map(|q| q.eq_ignore_ascii_case(question))
        != Some(true)
    {
        return Err(bad("an answer to another question"));
    }
    let flags = word(2);
    if flags & 0x0200 != 0 {
        return Ok(Parsed::Truncated);
    }
    match flags & 0xf {
        0 => {}
        3 => return Ok(Parsed::Done(Answer::NoSuchName)),
        rcode => return Err(bad(&format!("the nameserver answered rcode {rcode}"))),
    }
    let mut at = end;
    let mut ips = Vec::new();
    for _ in 0..word(6) {
        at = skip_name(msg, at)?;
        let rr = msg
            .get(at..at + 10)
            .ok_or_else(|| bad("a record past the message"))?;
        let (rtype, class) = (
            u16::from_be_bytes([rr[0], rr[1]]),
            u16::from_be_bytes([rr[2], rr[3]]),
        );
        let len = usize::from(u16::from_be_bytes([rr[8], rr[9]]));
        let data = msg
            .get(at + 10..at + 10 + len)
            .ok_or_else(|| bad("record data past the message"))?;
        at += 10 + len;
        match (rtype, class, len) {
            (TYPE_A, CLASS_IN, 4) => {
                ips.push(IpAddr::from(<[u8; 4]>::try_from(data).unwrap_or_default()))
            }
            (TYPE_AAAA, CLASS_IN, 16) => {
                ips.push(IpAddr::from(<[u8; 16]>::try_from(data).unwrap_or_default()))
            }
            _ => {} // a CNAME: its target's records follow in the same answer
        }
    }
    Ok(Parsed::Done(Answer::Found(ips)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESOLV: &str = "# kubelet\nsearch ns.svc.cluster.local svc.cluster.local\n\
                          nameserver 127.0.0.1\nnameserver ::1\noptions ndots:5 timeout:1 attempts:1\n";

    #[test]
    fn the_configuration_of_the_two_files() {
        let c = Config::parse(
            "127.0.0.1 localhost  # loop\n::1 localhost ip6-localhost\n10.0.0.2 Db.Local.\nbad line\n",
            RESOLV,
        );
        assert_eq!(
            c.resolve("LOCALHOST").unwrap(),
            vec![
                IpAddr::from([127, 0, 0, 1]),
                "::1".parse::<IpAddr>().unwrap()
            ]
        );
        assert_eq!(
            c.resolve("db.local").unwrap(),
            vec![IpAddr::from([10, 0, 0, 2])]
        );
        assert_eq!(c.nameservers.len(), 2);
        assert_eq!(
            (c.ndots, c.timeout, c.attempts),
            (5, Duration::from_secs(1), 1)
        );
        assert_eq!(
            c.candidates("db"),
            ["db.ns.svc.cluster.local", "db.svc.cluster.local", "db"]
        );
        assert_eq!(c.candidates("pypi.org."), ["pypi.org"]);
        let plain = Config::parse("", "nameserver 10.0.0.1\n");
        assert_eq!(plain.candidates("a.b"), ["a.b"]);
        let none = Config::parse("", "");
        assert_eq!(none.nameservers, vec!["127.0.0.1:53".parse().unwrap()]);
    }

    /// A nameserver on loopback that answers every A query with `ip` and every AAAA query with
    /// nothing, after one forged datagram of another id.
    fn nameserver(ip: [u8; 4]) -> SocketAddr {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let at = s.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                let q = &buf[..n];
                let qtype = u16::from_be_bytes([q[n - 4], q[n - 3]]);
                let mut forged = q.to_vec();
                forged[0] ^= 0xff;
                forged[2] |= 0x80;
                let _ = s.send_to(&forged, from);
                let mut a = q.to_vec();
                a[2] |= 0x80;
                if qtype == TYPE_A {
                    a[7] = 1;
                    a.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
                    a.extend_from_slice(&ip);
                }
                let _ = s.send_to(&a, from);
            }
        });
        at
    }

    #[test]
    fn a_name_is_asked_of_the_nameserver() {
        let server = nameserver([192, 0, 2, 7]);
        let mut c = Config::parse("", "");
        c.nameservers = vec![server];
        c.timeout = Duration::from_secs(2);
        assert_eq!(
            c.resolve("example.org").unwrap(),
            vec![IpAddr::from([192, 0, 2, 7])]
        );
    }

    #[test]
    fn answers_that_are_not_ours_are_refused() {
        let q = query(7, "a.org", TYPE_A).unwrap();
        let mut a = q.clone();
        a[2] |= 0x80;
        assert!(parse_answer(&a, 8, &q[HEADER..]).is_err(), "another id");
        assert!(parse_answer(&q, 7, &q[HEADER..]).is_err(), "a query");
        let other = query(7, "b.org", TYPE_A).unwrap();
        assert!(parse_answer(&a, 7, &other[HEADER..]).is_err());
        let mut nx = a.clone();
        nx[3] |= 3;
        assert!(matches!(
            parse_answer(&nx, 7, &q[HEADER..]),
            Ok(Parsed::Done(Answer::NoSuchName))
        ));
        let mut cut = a.clone();
        cut[7] = 1;
        assert!(
            parse_answer(&cut, 7, &q[HEADER..]).is_err(),
            "a missing record"
        );
        assert!(query(1, "a..b", TYPE_A).is_err());
    }
}
