//! Generated code of `proto/agent.proto`: messages, the tonic client and the tonic server.
#![allow(clippy::all)]

pub mod agent {
    tonic::include_proto!("sandboxes.agent.v1");
}

pub use agent::*;

/// Protocol version spoken by this build; behaviour changes bump it.
pub const PROTOCOL_VERSION: &str = "1";
