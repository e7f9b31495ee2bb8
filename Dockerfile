# Builds xmc and ships the binary with the default model.
#   docker build -t xmc .
#   docker run --rm xmc inspect models/default.xmcb
FROM rust:1.95-slim AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin xmc

FROM debian:bookworm-slim
WORKDIR /srv/xmc
COPY --from=build /src/target/release/xmc /usr/local/bin/xmc
COPY models/ models/
COPY config/ config/
ENTRYPOINT ["xmc"]
CMD ["inspect", "models/default.xmcb"]
