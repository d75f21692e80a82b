//! Allowed names as the sandbox sees them: the first time a program looks one up (`dns`), it
//! gets an address of the sandbox's own loopback (`127.77.x.y`), where the agent listens on the
//! name's ports and forwards each connection through the egress helper to the real name, which
//! the helper resolves outside. The policy is checked again for every connection, as for the
//! proxy's, and counted alike.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};

use super::policy::Ports;
use super::proxy::{accept, Opened};
use super::Proxy;

/// The names a sandbox may look up, and the listeners they may cost the agent (one per port of
/// each): a program looking up names without end must not run the agent out of descriptors.
const MAX_NAMES: u32 = 1024;
const MAX_LISTENERS: usize = 512;
/// The ports of a name a rule without a port holds: the web's (any port through the proxy).
pub const WEB_PORTS: [u16; 2] = [80, 443];

/// What a lookup gives.
pub enum Lookup {
    Address(Ipv4Addr),
    /// No rule holds the name.
    Refused,
    /// The sandbox looked up too many names already (`MAX_NAMES`, `MAX_LISTENERS`).
    Full,
}

/// The names given out so far and their addresses.
#[derive(Default)]
pub struct Names {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    /// Each name's address, and the ports listened on there.
    addresses: HashMap<String, (Ipv4Addr, Vec<u16>)>,
    listeners: usize,
}

/// The `n`th name's address (1-based): 127.77.0.1, 127.77.0.2, ...
fn address(n: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, 77, (n >> 8) as u8, n as u8)
}

fn listen(ip: Ipv4Addr, port: u16) -> std::io::Result<TcpListener> {
    let l = std::net::TcpListener::bind((ip, port))?;
    l.set_nonblocking(true)?;
    TcpListener::from_std(l)
}

/// The ports a name's forwarders listen on.
fn ports_of(ports: &Ports) -> Vec<u16> {
    match ports {
        Ports::Any => WEB_PORTS.to_vec(),
        Ports::Listed(p) => p.clone(),
    }
}

/// Ends a connection with a reset, as a refused or unreachable destination would.
fn reset(stream: TcpStream) {
    if let Ok(s) = stream.into_std() {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: setsockopt on a socket we own, with a live value of the right size.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&s),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                &linger as *const libc::linger as *const libc::c_void,
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
    }
}

impl Proxy {
    /// The sandbox's address of `name` (lower case, no trailing dot), listening on its ports
    /// from the first lookup on (and on ports a later policy allows it, `listen_allowed`).
    pub fn lookup(self: &Arc<Self>, name: &str) -> Lookup {
        let Some(ports) = self.policy().name_ports(name) else {
            return Lookup::Refused;
        };
        let mut table = self.names.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((ip, _)) = table.addresses.get(name) {
            let ip = *ip;
            self.listen_on(&mut table, name, &ports);
            return Lookup::Address(ip);
        }
        let n = table.addresses.len() as u32 + 1;
        if n > MAX_NAMES || table.listeners + ports_of(&ports).len() > MAX_LISTENERS {
            return Lookup::Full;
        }
        let ip = address(n);
        table.addresses.insert(name.to_string(), (ip, Vec::new()));
        self.listen_on(&mut table, name, &ports);
        Lookup::Address(ip)
    }

    /// After a policy change: the names looked up before get listeners on the ports the new
    /// policy allows them (a program that kept the address reaches them without a new lookup).
    /// Ports it no longer allows keep their listeners, whose connections it refuses.
    pub fn listen_allowed(self: &Arc<Self>) {
        let policy = self.policy();
        let mut table = self.names.table.lock().unwrap_or_else(|e| e.into_inner());
        let names: Vec<String> = table.addresses.keys().cloned().collect();
        for name in names {
            if let Some(ports) = policy.name_ports(&name) {
                self.listen_on(&mut table, &name, &ports);
            }
        }
    }

    /// Listens on those of `ports` that `name` has no listener on yet, within `MAX_LISTENERS`.
    fn listen_on(self: &Arc<Self>, table: &mut Table, name: &str, ports: &Ports) {
        let wanted = ports_of(ports);
        let Some((ip, have)) = table.addresses.get(name).cloned() else {
            return;
        };
        let mut listening = have;
        for port in wanted {
            if listening.contains(&port) || table.listeners >= MAX_LISTENERS {
                continue;
            }
            table.listeners += 1;
            listening.push(port);
            match listen(ip, port) {
                Ok(l) => {
                    tokio::spawn(self.clone().forward(l, name.to_string(), port));
                }
                // Taken by a program of this sandbox (its own traffic only): the name still
                // answers, and the proxy still serves it.
                Err(e) => eprintln!("sandbox-agent: egress: {name} on {ip}:{port}: {e}"),
            }
        }
        table.addresses.insert(name.to_string(), (ip, listening));
    }

    /// Forwards every connection to `listener` to `name:port`, until the runtime ends.
    async fn forward(self: Arc<Self>, listener: TcpListener, name: String, port: u16) {
        let name: Arc<str> = name.into();
        loop {
            let mut client = accept(&listener).await;
            let (me, name) = (self.clone(), name.clone());
            tokio::spawn(async move {
                match me.open(&name, port).await {
                    Opened::Connected(mut upstream) => {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                    Opened::Refused(_) | Opened::Failed(_) => reset(client),
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_distinct_loopback_ones() {
        assert_eq!(address(1), Ipv4Addr::new(127, 77, 0, 1));
        assert_eq!(address(256), Ipv4Addr::new(127, 77, 1, 0));
        assert_eq!(address(MAX_NAMES), Ipv4Addr::new(127, 77, 4, 0));
        assert!(address(MAX_NAMES).is_loopback());
    }
}
