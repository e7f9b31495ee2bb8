//! Compiles proto/open_inference.proto (the Open Inference Protocol's gRPC service) into Rust
//! for src/serve/grpc, with the `protoc` that protoc-bin-vendored ships, so a build needs no
//! system protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = tonic_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_build::configure()
        .build_client(false)
        // `bytes` fields as `Bytes`: raw tensor contents are views of the received message,
        // not copies.
        .bytes(["."])
        .compile_protos_with_config(config, &["proto/open_inference.proto"], &["proto"])?;
    Ok(())
}
