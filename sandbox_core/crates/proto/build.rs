//! Generates the agent protocol from `proto/agent.proto` (and `common.proto`, which it imports),
//! the single protocol source.
//! protoc comes from a vendored crate so the build needs nothing installed by hand.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../proto");
    let agent = proto_dir.join("agent.proto");
    println!("cargo:rerun-if-changed={}", agent.display());
    println!(
        "cargo:rerun-if-changed={}",
        proto_dir.join("common.proto").display()
    );
    if std::env::var_os("PROTOC").is_none() {
        std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    }
    tonic_prost_build::configure()
        .bytes(".")
        .compile_protos(&[agent], &[proto_dir])?;
    Ok(())
}
