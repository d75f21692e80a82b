//! Generated code of `proto/agent.proto` and the `common.proto` it imports: messages, the tonic
//! client and the tonic server, all re-exported at the crate root.
#![allow(clippy::all)]

pub mod sandboxes {
    pub mod agent {
        pub mod v1 {
            tonic::include_proto!("sandboxes.agent.v1");
        }
    }
    pub mod common {
        pub mod v1 {
            tonic::include_proto!("sandboxes.common.v1");
        }
    }
}

pub use sandboxes::agent::v1::*;
pub use sandboxes::common::v1::*;

/// Protocol version spoken by this build: an incompatible change of `proto/*.proto` bumps it.
pub const PROTOCOL_VERSION: &str = "1";

/// The agent's version, reported by `Info` (and `_native.agent_version()`): every change of the
/// agent's behaviour moves it and is recorded in `crates/agent/CHANGELOG.md`, whose newest
/// heading it is; the suffix is the protocol it speaks.
pub const AGENT_VERSION: &str = "0.7.0+proto1";
