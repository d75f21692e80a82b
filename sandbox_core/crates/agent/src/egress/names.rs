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
    addresses: HashMap<String, Ipv4Addr>,
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
    /// from the first lookup on.
    pub fn lookup(self: &Arc<Self>, name: &str) -> Lookup {
        let Some(ports) = self.policy().name_ports(name) else {
            return Lookup::Refused;
        };
        let mut table = self.names.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ip) = table.addresses.get(name) {
            return Lookup::Address(*ip);
        }
        let ports = match ports {
            Ports::Any => WEB_PORTS.to_vec(),
            Ports::Listed(p) => p,
        };
        let n = table.addresses.len() as u32 + 1;
        if n > MAX_NAMES || table.listeners + ports.len() > MAX_LISTENERS {
            return Lookup::Full;
        }
        table.listeners += ports.len();
        let ip = address(n);
        for port in ports {
            match listen(ip, port) {
                Ok(l) => {
                    tokio::spawn(self.clone().forward(l, name.to_string(), port));
                }
                // Taken by a program of this sandbox (its own traffic only): the name still
                // answers, and the proxy still serves it.
                Err(e) => eprintln!("sandbox-agent: egress: {name} on {ip}:{port}: {e}"),
            }
        }
        table.addresses.insert(name.to_string(), ip);
        Lookup::Address(ip)
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
