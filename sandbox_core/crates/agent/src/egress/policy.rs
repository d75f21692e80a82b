//! An egress allow-list: which hosts a sandbox's programs may reach through its proxy.
//!
//! A rule is a host name (`pypi.org`), a wildcard for its subdomains (`*.pythonhosted.org`), an
//! address (`10.1.2.3`, `[::1]`) or a network (`10.0.0.0/8`, `fd00::/8`), each optionally with
//! `:port` (no port: every port). A name is matched before it is resolved; the addresses it
//! resolves to must then be public ones, or inside an address or network rule: a name never
//! leads to the host's loopback or a private network unless a rule names that address.

use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A lower-case name; `wildcard` matches its subdomains (not the name itself).
    Name {
        name: String,
        wildcard: bool,
    },
    Net {
        addr: IpAddr,
        prefix: u8,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    target: Target,
    port: Option<u16>,
}

#[derive(Debug, Clone, Default)]
pub struct Policy {
    rules: Vec<Rule>,
}

/// How a requested destination fares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed: an address rule holds it, or a name rule (its addresses are checked next).
    Allowed,
    Refused,
}

fn bad(rule: &str, why: &str) -> String {
    format!("egress rule {rule:?}: {why}")
}

fn parse_port(rule: &str, p: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(bad(rule, "the port must be 1..65535")),
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl Rule {
    pub fn parse(rule: &str) -> Result<Rule, String> {
        let r = rule.trim();
        // [v6]:port, [v6], or v6/prefix (a bare v6 address has colons of its own).
        let (host, port) = if let Some(rest) = r.strip_prefix('[') {
            let (h, tail) = rest
                .split_once(']')
                .ok_or_else(|| bad(rule, "unclosed ["))?;
            match tail.strip_prefix(':') {
                Some(p) => (h, Some(parse_port(rule, p)?)),
                None if tail.is_empty() => (h, None),
                None => return Err(bad(rule, "text after ]")),
            }
        } else if r.matches(':').count() == 1 {
            let (h, p) = r.split_once(':').unwrap_or((r, ""));
            (h, Some(parse_port(rule, p)?))
        } else {
            (r, None)
        };
        let (host, prefix) = match host.split_once('/') {
            Some((h, p)) => (
                h,
                Some(
                    p.parse::<u8>()
                        .map_err(|_| bad(rule, "bad prefix length"))?,
                ),
            ),
            None => (host, None),
        };
        if let Ok(addr) = host.parse::<IpAddr>() {
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix = prefix.unwrap_or(max);
            if prefix > max {
                return Err(bad(rule, "prefix longer than the address"));
            }
            return Ok(Rule {
                target: Target::Net { addr, prefix },
                port,
            });
        }
        if prefix.is_some() {
            return Err(bad(rule, "a prefix needs an address"));
        }
        let lower = host.to_ascii_lowercase();
        let (name, wildcard) = match lower.strip_prefix("*.") {
            Some(n) => (n.to_string(), true),
            None => (lower.trim_end_matches('.').to_string(), false),
        };
        if !valid_name(&name) {
            return Err(bad(rule, "not a host name, address or network"));
        }
        Ok(Rule {
            target: Target::Name { name, wildcard },
            port,
        })
    }

    fn port_ok(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }
}

fn in_net(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - prefix)
            };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - prefix)
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// An address of the public internet: not loopback, private, link-local, shared (CGNAT),
/// unspecified, multicast or broadcast.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            !(a.is_loopback()
                || a.is_private()
                || a.is_link_local()
                || a.is_unspecified()
                || a.is_multicast()
                || a.is_broadcast()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64))
        }
        IpAddr::V6(a) => {
            if let Some(v4) = a.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = a.segments();
            !(a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80)
        }
    }
}

impl Policy {
    pub fn parse(rules: &[String]) -> Result<Policy, String> {
        Ok(Policy {
            rules: rules
                .iter()
                .map(|r| Rule::parse(r))
                .collect::<Result<_, _>>()?,
        })
    }

    /// The verdict on `host:port` as asked for (a name or an address), before any resolution.
    pub fn check(&self, host: &str, port: u16) -> Verdict {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<IpAddr>() {
            return if self.address_listed(ip, port) {
                Verdict::Allowed
            } else {
                Verdict::Refused
            };
        }
        let host = host.to_ascii_lowercase();
        let host = host.trim_end_matches('.');
        let listed = self.rules.iter().any(|r| {
            r.port_ok(port)
                && match &r.target {
                    Target::Name {
                        name,
                        wildcard: false,
                    } => host == name,
                    Target::Name {
                        name,
                        wildcard: true,
                    } => host
                        .strip_suffix(name.as_str())
                        .is_some_and(|rest| rest.ends_with('.')),
                    Target::Net { .. } => false,
                }
        });
        if listed {
            Verdict::Allowed
        } else {
            Verdict::Refused
        }
    }

    fn address_listed(&self, ip: IpAddr, port: u16) -> bool {
        self.rules.iter().any(|r| {
            r.port_ok(port)
                && matches!(r.target, Target::Net { addr, prefix } if in_net(ip, addr, prefix))
        })
    }

    /// Whether a name that `check` allowed may be reached at `ip`, one of its addresses.
    pub fn address_ok(&self, ip: IpAddr, port: u16) -> bool {
        is_public(ip) || self.address_listed(ip, port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(rules: &[&str]) -> Policy {
        Policy::parse(&rules.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn names_wildcards_ports() {
        let p = policy(&["pypi.org", "*.pythonhosted.org:443", "Example.COM:80"]);
        assert_eq!(p.check("pypi.org", 443), Verdict::Allowed);
        assert_eq!(p.check("PyPI.org.", 80), Verdict::Allowed);
        assert_eq!(p.check("evilpypi.org", 443), Verdict::Refused);
        assert_eq!(p.check("files.pythonhosted.org", 443), Verdict::Allowed);
        assert_eq!(p.check("files.pythonhosted.org", 80), Verdict::Refused);
        assert_eq!(p.check("pythonhosted.org", 443), Verdict::Refused);
        assert_eq!(p.check("xpythonhosted.org", 443), Verdict::Refused);
        assert_eq!(p.check("example.com", 80), Verdict::Allowed);
        assert_eq!(p.check("example.com", 443), Verdict::Refused);
        assert_eq!(p.check("10.0.0.1", 443), Verdict::Refused);
    }

    #[test]
    fn addresses_and_networks() {
        let p = policy(&["127.0.0.2:8080", "10.0.0.0/8", "[::1]:9", "fd00::/8"]);
        assert_eq!(p.check("127.0.0.2", 8080), Verdict::Allowed);
        assert_eq!(p.check("127.0.0.2", 8081), Verdict::Refused);
        assert_eq!(p.check("127.0.0.1", 8080), Verdict::Refused);
        assert_eq!(p.check("10.200.3.4", 1), Verdict::Allowed);
        assert_eq!(p.check("11.0.0.1", 1), Verdict::Refused);
        assert_eq!(p.check("[::1]", 9), Verdict::Allowed);
        assert_eq!(p.check("fd12::1", 22), Verdict::Allowed);
        assert_eq!(p.check("localhost", 8080), Verdict::Refused);
    }

    #[test]
    fn a_name_never_leads_to_a_private_address_unless_listed() {
        let p = policy(&["pypi.org", "10.1.0.0/16:443"]);
        assert!(p.address_ok("151.101.0.223".parse().unwrap(), 443));
        for ip in [
            "127.0.0.1",
            "10.0.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
        ] {
            assert!(!p.address_ok(ip.parse().unwrap(), 443), "{ip}");
        }
        assert!(p.address_ok("10.1.2.3".parse().unwrap(), 443));
        assert!(!p.address_ok("10.1.2.3".parse().unwrap(), 80));
    }

    #[test]
    fn bad_rules_are_refused_with_a_reason() {
        for r in [
            "",
            "a b",
            "host:0",
            "host:99999",
            "10.0.0.0/33",
            "name/8",
            "[::1",
            "*.",
            "a..b",
        ] {
            assert!(Rule::parse(r).is_err(), "{r:?}");
        }
    }
}
