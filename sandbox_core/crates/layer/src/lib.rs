//! Layers on the host: directories in the form an overlay takes as a lower layer (deletions are
//! whiteout devices, a directory that hides the layers beneath carries the overlay's opaque
//! attribute), and the OCI layer tars that carry them (`.wh.<name>` and `.wh..wh..opq` entries).
//! Every conversion between the two forms is here, and only here knows the names of both
//! (`whiteout`):
//!
//! - `unpack`: the agent's `Checkpoint` tar (proto/agent.proto) into a fresh layer directory,
//!   named by the stream's sha256 and bounded while it runs (`Limits`);
//! - `pack`: a layer directory into a gzipped OCI layer tar, the same bytes for the same layer,
//!   with the digests a registry and an image config name it by;
//! - `squash`: layers (bottom first) merged into one bottom layer, files hard-linked;
//! - `apply`: an OCI image layer tar onto an image's root file system, whiteouts deleting what
//!   the layers below it made.
//!
//! What a tar brings (a sandbox's stream, an image's layer) never reaches outside the directory
//! it is unpacked into: paths are checked and resolved there (`safe`).

mod apply;
mod chunks;
mod digest;
mod pack;
mod safe;
mod squash;
mod unpack;
pub mod whiteout;

#[cfg(test)]
mod testing;

pub use apply::apply;
pub use chunks::Chunks;
pub use pack::{pack, Packed, Placement};
pub use squash::squash;
pub use unpack::{unpack, Limits, Unpacked};
