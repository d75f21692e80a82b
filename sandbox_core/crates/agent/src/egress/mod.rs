//! Egress by policy: a sandbox whose network is an allow-list has a network namespace with only
//! `lo`, whose one way out is the proxy on it (`proxy`); the proxy's connections are opened by
//! the helper (`helper`), a process that stays in the outside network namespace and file system.
//! The policy (`policy`) is checked by both; nothing a program does inside changes it.

pub mod helper;
pub mod policy;
pub mod proxy;

pub use proxy::{Counters, Proxy, PROXY_ADDR};
