//! Egress by policy: a sandbox whose network is an allow-list has a network namespace with only
//! `lo`, whose one way out is the proxy on it (`proxy`); the proxy's connections are opened by
//! the helper (`helper`), a process that stays in the outside network namespace and file system.
//! Programs that ignore the proxy variables reach allowed names through the sandbox's DNS
//! (`dns`), which gives each an address of the sandbox's loopback where the agent forwards
//! connections the same way (`names`). The policy (`policy`) is checked by the agent and the
//! helper alike; nothing a program does inside changes it.

pub mod dns;
pub mod helper;
pub mod names;
pub use sandbox_egress as policy;
pub mod proxy;
pub mod resolve;

pub use dns::{DNS_ADDR, DNS_HOST};
pub use proxy::{Proxy, PROXY_ADDR};
