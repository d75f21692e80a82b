//! The sandbox's DNS: a stub server on the sandbox's own loopback (`DNS_ADDR`, named by the
//! sandbox's `/etc/resolv.conf`) that answers only for names the allow-list holds. A sandbox
//! without a root of its own (a pod's) keeps the outside's `/etc/resolv.conf`: the stub also
//! answers at the addresses it names (`nameservers`), which the agent puts on the sandbox's `lo`.
//!
//! An allowed name gets an address of the sandbox's own loopback (`names`), where the agent
//! listens on the name's ports and forwards each connection through the egress helper, which
//! resolves the real name outside; so programs that ignore the proxy variables (a raw socket,
//! ssh, a database client) reach allowed hosts by name. Any other name is NXDOMAIN; IPv6 and the
//! other record types of an allowed name are answered empty, so resolvers fall back to the A
//! record. Only UDP: every answer is a few dozen bytes, never truncated.

use std::net::Ipv4Addr;
use std::sync::Arc;

use tokio::net::UdpSocket;

use super::names::Lookup;
use super::Proxy;

/// Where the stub listens inside the sandbox (what `/etc/resolv.conf` names).
pub const DNS_ADDR: &str = "127.0.0.53:53";
/// The nameserver line's address.
pub const DNS_HOST: &str = "127.0.0.53";
/// The IPv4 nameservers of a resolv.conf among the first three it names (the resolver asks no
/// more than three).
pub fn nameservers(resolv: &str) -> Vec<Ipv4Addr> {
    resolv
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next()? == "nameserver").then_some(())?;
            words.next()?.parse::<std::net::IpAddr>().ok()
        })
        .take(3)
        .filter_map(|ip| match ip {
            std::net::IpAddr::V4(v4) => Some(v4),
            std::net::IpAddr::V6(_) => None,
        })
        .collect()
}

/// The loopback addresses of names do not change while the sandbox lives.
const TTL: u32 = 3600;
const HEADER: usize = 12;
const MAX_NAME: usize = 255;

const TYPE_A: u16 = 1;
const TYPE_ANY: u16 = 255;
const CLASS_IN: u16 = 1;

/// Response codes this stub gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rcode {
    NoError = 0,
    FormErr = 1,
    ServFail = 2,
    NxDomain = 3,
    NotImp = 4,
}

/// The one question of a query.
#[derive(Debug, PartialEq, Eq)]
pub struct Query<'a> {
    id: u16,
    flags: u16,
    /// Lower case, without the trailing dot; `None` when a label is not a host name's.
    pub name: Option<String>,
    pub qtype: u16,
    pub qclass: u16,
    /// The question section as sent (echoed in the answer).
    question: &'a [u8],
}

impl Query<'_> {
    fn opcode(&self) -> u16 {
        (self.flags >> 11) & 0xf
    }

    /// Whether the question asks for an A record.
    pub fn wants_a(&self) -> bool {
        matches!(self.qtype, TYPE_A | TYPE_ANY) && self.qclass == CLASS_IN
    }
}

/// Parses a query with one question. `Err(Some(id))`: malformed past its header (answered
/// FORMERR); `Err(None)`: not a query at all (dropped).
pub fn parse(msg: &[u8]) -> Result<Query<'_>, Option<u16>> {
    if msg.len() < HEADER {
        return Err(None);
    }
    let word = |i: usize| u16::from_be_bytes([msg[i], msg[i + 1]]);
    let (id, flags) = (word(0), word(2));
    if flags & 0x8000 != 0 {
        return Err(None); // a response
    }
    if word(4) != 1 {
        return Err(Some(id));
    }
    let mut at = HEADER;
    let mut labels: Vec<String> = Vec::new();
    let mut valid = true;
    let mut length = 0;
    loop {
        let n = *msg.get(at).ok_or(Some(id))? as usize;
        at += 1;
        if n == 0 {
            break;
        }
        // A question's name is never compressed; labels are at most 63 bytes.
        if n > 63 {
            return Err(Some(id));
        }
        let label = msg.get(at..at + n).ok_or(Some(id))?;
        length += n + 1;
        if length > MAX_NAME {
            return Err(Some(id));
        }
        valid &= label
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_');
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        at += n;
    }
    let tail = msg.get(at..at + 4).ok_or(Some(id))?;
    let qtype = u16::from_be_bytes([tail[0], tail[1]]);
    let qclass = u16::from_be_bytes([tail[2], tail[3]]);
    Ok(Query {
        id,
        flags,
        name: (valid && !labels.is_empty()).then(|| labels.join(".")),
        qtype,
        qclass,
        question: &msg[HEADER..at + 4],
    })
}

/// The answer to `q`: `rcode`, and an A record of `addr` when given.
pub fn answer(q: &Query<'_>, rcode: Rcode, addr: Option<Ipv4Addr>) -> Vec<u8> {
    // QR, the query's opcode and RD, authoritative (this is the sandbox's whole view), RA.
    let flags = 0x8000 | (q.flags & 0x7900) | 0x0400 | 0x0080 | rcode as u16;
    let mut out = Vec::with_capacity(HEADER + q.question.len() + 16);
    out.extend_from_slice(&q.id.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&u16::from(addr.is_some()).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(q.question);
    if let Some(ip) = addr {
        out.extend_from_slice(&[0xc0, HEADER as u8]); // the name: a pointer to the question's
        out.extend_from_slice(&TYPE_A.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&TTL.to_be_bytes());
        out.extend_from_slice(&4u16.to_be_bytes());
        out.extend_from_slice(&ip.octets());
    }
    out
}

fn formerr(id: u16) -> Vec<u8> {
    let mut out = vec![0u8; HEADER];
    out[..2].copy_from_slice(&id.to_be_bytes());
    out[2..4].copy_from_slice(&(0x8000u16 | 0x0080 | Rcode::FormErr as u16).to_be_bytes());
    out
}

impl Proxy {
    /// The reply to one datagram (None: nothing to answer).
    fn reply(self: &Arc<Self>, msg: &[u8]) -> Option<Vec<u8>> {
        let q = match parse(msg) {
            Ok(q) => q,
            Err(id) => return id.map(formerr),
        };
        if q.opcode() != 0 {
            return Some(answer(&q, Rcode::NotImp, None));
        }
        let Some(name) = q.name.as_deref() else {
            return Some(answer(&q, Rcode::NxDomain, None));
        };
        Some(match self.lookup(name) {
            Lookup::Address(ip) if q.wants_a() => answer(&q, Rcode::NoError, Some(ip)),
            Lookup::Address(_) => answer(&q, Rcode::NoError, None),
            Lookup::Refused => answer(&q, Rcode::NxDomain, None),
            Lookup::Full => answer(&q, Rcode::ServFail, None),
        })
    }

    /// Answers queries until the runtime ends.
    pub async fn serve_dns(self: Arc<Self>, socket: UdpSocket) {
        let mut buf = [0u8; 1500];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                continue;
            };
            if let Some(out) = self.reply(&buf[..n]) {
                let _ = socket.send_to(&out, from).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nameservers_of_a_resolv_conf() {
        let conf = "# kubelet\nsearch default.svc.cluster.local\nnameserver 10.96.0.10\n\
                    nameserver fd00::a\nnameserver  10.0.0.2 # second\nnameserver 10.0.0.3\n\
                    options ndots:5\n";
        let want: Vec<Ipv4Addr> = vec![[10, 96, 0, 10].into(), [10, 0, 0, 2].into()];
        assert_eq!(nameservers(conf), want);
        assert!(nameservers("nameserver\nnameserverx 1.2.3.4\n").is_empty());
    }

    /// A query as glibc sends it: RD set, one question, an EDNS OPT record in the additional
    /// section.
    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut m = vec![0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
        for l in name.split('.') {
            m.push(l.len() as u8);
            m.extend_from_slice(l.as_bytes());
        }
        m.push(0);
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&CLASS_IN.to_be_bytes());
        m.extend_from_slice(&[0, 0, 41, 4, 208, 0, 0, 0, 0, 0, 0]);
        m
    }

    #[test]
    fn a_query_and_its_answer() {
        let m = query("PyPI.org", TYPE_A);
        let q = parse(&m).unwrap();
        assert_eq!(q.name.as_deref(), Some("pypi.org"));
        assert!(q.wants_a());
        let a = answer(&q, Rcode::NoError, Some(Ipv4Addr::new(127, 77, 0, 1)));
        assert_eq!(&a[..2], &[0xab, 0xcd]);
        assert_eq!(u16::from_be_bytes([a[2], a[3]]), 0x8580); // QR AA RD RA, NOERROR
        assert_eq!(&a[4..12], &[0, 1, 0, 1, 0, 0, 0, 0]);
        assert_eq!(&a[12..12 + q.question.len()], q.question);
        assert_eq!(&a[a.len() - 4..], &[127, 77, 0, 1]);
        let none = answer(&parse(&query("x.org", 28)).unwrap(), Rcode::NxDomain, None);
        assert_eq!(none[3] & 0xf, 3);
        assert_eq!(&none[6..8], &[0, 0]);
    }

    #[test]
    fn what_is_not_a_plain_query() {
        assert_eq!(parse(&[1, 2, 3]), Err(None));
        let mut response = query("a.org", TYPE_A);
        response[2] |= 0x80;
        assert_eq!(parse(&response), Err(None));
        let mut two = query("a.org", TYPE_A);
        two[5] = 2;
        assert_eq!(parse(&two), Err(Some(0xabcd)));
        let cut = query("a.org", TYPE_A);
        assert_eq!(parse(&cut[..16]), Err(Some(0xabcd)));
        let mut pointer = query("a.org", TYPE_A);
        pointer[12] = 0xc0;
        assert_eq!(parse(&pointer), Err(Some(0xabcd)));
        let odd = query("a b.org", TYPE_A);
        assert_eq!(parse(&odd).unwrap().name, None);
        let f = formerr(7);
        assert_eq!((f[0], f[1], f[3] & 0xf), (0, 7, 1));
    }
}
