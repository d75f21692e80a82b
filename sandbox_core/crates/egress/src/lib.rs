//! An egress policy: which hosts a sandbox's programs may reach through its proxy. An allow-list
//! lets out only what its rules name; a deny-list lets out every public destination but what its
//! rules name (an empty deny-list: the whole public internet).
//!
//! A rule is a host name (`pypi.org`), a wildcard for its subdomains (`*.pythonhosted.org`), an
//! address (`10.1.2.3`, `[::1]`) or a network (`10.0.0.0/8`, `fd00::/8`), each optionally with
//! `:port` (no port: every port). A name is matched before it is resolved; the addresses it
//! resolves to must then be public ones, or inside an address or network rule: a name never
//! leads to the host's loopback or a private network unless a rule names that address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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
    /// The rules are what is refused (a deny-list), not what is allowed.
    deny: bool,
}

/// The ports a name may be reached on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ports {
    /// A rule without a port holds the name.
    Any,
    /// Only these (rules with a port).
    Listed(Vec<u16>),
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

    /// What the rule names, and its port (`None`: every port).
    pub fn reach(&self) -> (Reach, Option<u16>) {
        let reach = match &self.target {
            Target::Name { name, wildcard } => Reach::Name {
                name: name.clone(),
                wildcard: *wildcard,
            },
            Target::Net { addr, prefix } => Reach::Net {
                cidr: format!("{}/{prefix}", network_of(*addr, *prefix)),
            },
        };
        (reach, self.port)
    }

    /// Whether this is a name rule holding `host` (lower case, no trailing dot).
    fn holds_name(&self, host: &str) -> bool {
        match &self.target {
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
    }
}

/// The rule in the form `Rule::parse` reads back.
impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = match &self.target {
            Target::Name { name, wildcard } => {
                format!("{}{name}", if *wildcard { "*." } else { "" })
            }
            Target::Net { addr, prefix } => format!("{addr}/{prefix}"),
        };
        match (self.port, &self.target) {
            (None, _) => f.write_str(&host),
            (Some(p), Target::Net { addr, .. }) if addr.is_ipv6() => write!(f, "[{host}]:{p}"),
            (Some(p), _) => write!(f, "{host}:{p}"),
        }
    }
}

/// The network address of `addr/prefix` (its host bits cleared).
fn network_of(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
        }
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

/// The networks that are not the public internet: loopback, private, link-local, shared
/// (CGNAT), unspecified, multicast and broadcast. An IPv4-mapped IPv6 address is judged by its
/// IPv4 address.
pub const NON_PUBLIC: [(IpAddr, u8); 14] = [
    (IpAddr::V4(Ipv4Addr::new(0, 0, 0, 0)), 8),
    (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)), 8),
    (IpAddr::V4(Ipv4Addr::new(100, 64, 0, 0)), 10),
    (IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), 8),
    (IpAddr::V4(Ipv4Addr::new(169, 254, 0, 0)), 16),
    (IpAddr::V4(Ipv4Addr::new(172, 16, 0, 0)), 12),
    (IpAddr::V4(Ipv4Addr::new(192, 168, 0, 0)), 16),
    (IpAddr::V4(Ipv4Addr::new(224, 0, 0, 0)), 4),
    (IpAddr::V4(Ipv4Addr::BROADCAST), 32),
    (IpAddr::V6(Ipv6Addr::UNSPECIFIED), 128),
    (IpAddr::V6(Ipv6Addr::LOCALHOST), 128),
    (IpAddr::V6(Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0)), 7),
    (IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0)), 10),
    (IpAddr::V6(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0)), 8),
];

/// An address of the public internet: in none of `NON_PUBLIC`.
pub fn is_public(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    !NON_PUBLIC
        .iter()
        .any(|&(net, prefix)| in_net(ip, net, prefix))
}

/// What one rule names, for whoever enforces it outside the agent too (a cluster's network
/// policy): a name (`wildcard`: its subdomains) or a network in CIDR form, and its port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    Name { name: String, wildcard: bool },
    Net { cidr: String },
}

impl Policy {
    /// An allow-list.
    pub fn parse(rules: &[String]) -> Result<Policy, String> {
        Self::parse_as(rules, false)
    }

    /// An allow-list, or with `deny` a deny-list.
    pub fn parse_as(rules: &[String], deny: bool) -> Result<Policy, String> {
        Ok(Policy {
            rules: rules
                .iter()
                .map(|r| Rule::parse(r))
                .collect::<Result<_, _>>()?,
            deny,
        })
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether the rules are a deny-list.
    pub fn is_deny(&self) -> bool {
        self.deny
    }

    /// The verdict on `host:port` as asked for (a name or an address), before any resolution.
    /// A deny-list allows a name no rule holds, and a public address no rule holds.
    pub fn check(&self, host: &str, port: u16) -> Verdict {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let allowed = if let Ok(ip) = host.parse::<IpAddr>() {
            if self.deny {
                is_public(ip) && !self.address_listed(ip, port)
            } else {
                self.address_listed(ip, port)
            }
        } else {
            let host = host.to_ascii_lowercase();
            let host = host.trim_end_matches('.');
            let held = self
                .rules
                .iter()
                .any(|r| r.port_ok(port) && r.holds_name(host));
            held != self.deny
        };
        if allowed {
            Verdict::Allowed
        } else {
            Verdict::Refused
        }
    }

    /// The ports a name rule lets `host` (a name, lower case, no trailing dot) be reached on;
    /// `None` when no rule holds the name (a deny-list: when a rule without a port holds it;
    /// one with a port refuses that port when a connection is opened).
    pub fn name_ports(&self, host: &str) -> Option<Ports> {
        if self.deny {
            let refused = self
                .rules
                .iter()
                .any(|r| r.port.is_none() && r.holds_name(host));
            return (!refused).then_some(Ports::Any);
        }
        let mut listed = Vec::new();
        let mut any = false;
        for r in self.rules.iter().filter(|r| r.holds_name(host)) {
            match r.port {
                None => any = true,
                Some(p) if !listed.contains(&p) => listed.push(p),
                Some(_) => {}
            }
        }
        match (any, listed.is_empty()) {
            (true, _) => Some(Ports::Any),
            (false, false) => Some(Ports::Listed(listed)),
            (false, true) => None,
        }
    }

    fn address_listed(&self, ip: IpAddr, port: u16) -> bool {
        self.rules.iter().any(|r| {
            r.port_ok(port)
                && matches!(r.target, Target::Net { addr, prefix } if in_net(ip, addr, prefix))
        })
    }

    /// Whether a name that `check` allowed may be reached at `ip`, one of its addresses: a
    /// public one (not refused by a deny-list), or one an allow-list names.
    pub fn address_ok(&self, ip: IpAddr, port: u16) -> bool {
        if self.deny {
            is_public(ip) && !self.address_listed(ip, port)
        } else {
            is_public(ip) || self.address_listed(ip, port)
        }
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
    fn the_ports_of_a_name() {
        let p = policy(&[
            "pypi.org",
            "*.pythonhosted.org:443",
            "git.example:22",
            "git.example:443",
        ]);
        assert_eq!(p.name_ports("pypi.org"), Some(Ports::Any));
        assert_eq!(
            p.name_ports("files.pythonhosted.org"),
            Some(Ports::Listed(vec![443]))
        );
        assert_eq!(
            p.name_ports("git.example"),
            Some(Ports::Listed(vec![22, 443]))
        );
        assert_eq!(p.name_ports("pythonhosted.org"), None);
        assert_eq!(p.name_ports("10.0.0.1"), None);
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
    fn what_a_rule_reaches() {
        let p = policy(&[
            "*.pythonhosted.org:443",
            "10.1.2.3/8",
            "[fd00::1]:9",
            "pypi.org",
        ]);
        let reach: Vec<_> = p.rules().iter().map(Rule::reach).collect();
        assert_eq!(
            reach,
            vec![
                (
                    Reach::Name {
                        name: "pythonhosted.org".into(),
                        wildcard: true
                    },
                    Some(443)
                ),
                (
                    Reach::Net {
                        cidr: "10.0.0.0/8".into()
                    },
                    None
                ),
                (
                    Reach::Net {
                        cidr: "fd00::1/128".into()
                    },
                    Some(9)
                ),
                (
                    Reach::Name {
                        name: "pypi.org".into(),
                        wildcard: false
                    },
                    None
                ),
            ]
        );
        assert_eq!(
            network_of("1.2.3.4".parse().unwrap(), 0).to_string(),
            "0.0.0.0"
        );
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

    #[test]
    fn rules_read_back() {
        for r in [
            "pypi.org",
            "*.x.org:443",
            "10.0.0.0/8",
            "1.2.3.4:80",
            "fd00::/8",
            "[::1]:22",
        ] {
            let rule = Rule::parse(r).unwrap();
            assert_eq!(Rule::parse(&rule.to_string()).unwrap(), rule, "{r}");
        }
    }

    #[test]
    fn deny_lists() {
        let deny = |rules: &[&str]| {
            Policy::parse_as(
                &rules.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                true,
            )
            .unwrap()
        };
        let open = deny(&[]);
        assert!(open.is_deny());
        assert_eq!(open.check("pypi.org", 443), Verdict::Allowed);
        assert_eq!(open.check("1.1.1.1", 53), Verdict::Allowed);
        // Only the public internet: no address of the host's loopback or a private network.
        assert_eq!(open.check("127.0.0.1", 80), Verdict::Refused);
        assert_eq!(open.check("10.0.0.1", 80), Verdict::Refused);
        assert!(!open.address_ok("169.254.169.254".parse().unwrap(), 80));
        assert!(open.address_ok("8.8.8.8".parse().unwrap(), 443));
        assert_eq!(open.name_ports("example.com"), Some(Ports::Any));

        let p = deny(&["evil.com", "*.tracker.net:443", "8.8.8.0/24"]);
        assert_eq!(p.check("evil.com", 80), Verdict::Refused);
        assert_eq!(p.check("EVIL.com.", 443), Verdict::Refused);
        assert_eq!(p.check("good.com", 443), Verdict::Allowed);
        assert_eq!(p.check("a.tracker.net", 443), Verdict::Refused);
        assert_eq!(p.check("a.tracker.net", 80), Verdict::Allowed);
        assert_eq!(p.check("8.8.8.8", 53), Verdict::Refused);
        assert!(!p.address_ok("8.8.8.9".parse().unwrap(), 443));
        assert!(p.address_ok("8.8.4.4".parse().unwrap(), 443));
        assert_eq!(p.name_ports("evil.com"), None);
        assert_eq!(p.name_ports("a.tracker.net"), Some(Ports::Any));
    }
}
