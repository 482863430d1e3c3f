//! Generates the kubelet's gRPC services (server and client) from
//! `proto/`, compiled by protox (no protoc needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/pluginregistration.proto", "proto/dra.proto"];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(descriptors)?;
    Ok(())
}
