# Multi-stage build: compile xmc, then ship the binary with the default model, as a non-root user.
#   docker build -t xmc .
#   docker run --rm -p 8080:8080 xmc
FROM rust:1.95-slim AS chef
# cargo-chef turns the manifests into a recipe and builds the dependencies from it alone, so a
# source change does not rebuild them (the `cook` layer below stays cached while the recipe is
# unchanged; versions are masked in it, so a version bump does not invalidate it either).
RUN cargo install cargo-chef --locked --version 0.1.78
WORKDIR /src

FROM chef AS plan
# Only what the build reads: the manifests (cargo loads every declared target, benches included,
# and the loadtest member's), the build flags (.cargo/config.toml: x86-64-v2, whose POPCNT the
# search uses; the recipe carries them, so the dependencies are built with them too), the
# sources, the OpenAPI document the server embeds, and the gRPC service's .proto with the build
# script that compiles it (with the protoc that protoc-bin-vendored ships).
COPY Cargo.toml Cargo.lock openapi.json build.rs ./
COPY proto/ proto/
COPY .cargo/ .cargo/
COPY src/ src/
COPY benches/ benches/
COPY loadtest/Cargo.toml loadtest/
COPY loadtest/src/ loadtest/src/
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS build
COPY --from=plan /src/recipe.json recipe.json
RUN cargo chef cook --release --locked --recipe-path recipe.json --bin xmc
COPY --from=plan /src/ ./
# The release profile keeps line-level debug info for `perf` (36 of the binary's 43 MB). The
# image ships without it: `strip --strip-debug` keeps the symbol table, so `perf` and a panic's
# backtrace still name functions, and leaves the code byte for byte as built (7 MB). The build
# stage keeps the full binary: `docker build --target build` for line-level profiles.
RUN cargo build --release --locked --bin xmc \
 && strip --strip-debug -o target/release/xmc.stripped target/release/xmc

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home-dir /srv/xmc xmc
WORKDIR /srv/xmc
COPY --from=build /src/target/release/xmc.stripped /usr/local/bin/xmc
COPY models/ models/
# Only the server's config: the image serves, and carries no data for the training configs.
COPY config/server.toml config/
USER xmc
EXPOSE 8080
ENV XMC_BIND=0.0.0.0:8080
# No curl in the slim image: bash's /dev/tcp speaks enough HTTP for a health probe.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q ' 200 ' <&3"]
ENTRYPOINT ["xmc"]
CMD ["serve", "--config", "config/server.toml"]
