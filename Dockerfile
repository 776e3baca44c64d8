# syntax=docker/dockerfile:1
# dljob: the admission webhook and reconciler in one binary.
#   docker build -t ghcr.io/dljob/dljob:0.1.0 .
# Not built in CI here (no Docker daemon on these machines); deploy/
# references this image name. RUN --mount needs BuildKit (docker >= 23).

FROM rust:1.95-bookworm AS build
WORKDIR /src
# The whole context (see .dockerignore), so every target Cargo.toml declares
# (benches, tests) is present when cargo reads the manifest.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin dljob \
    && install -D -m 0755 target/release/dljob /out/dljob

# distroless/cc: glibc and libgcc for the binary, CA roots, no shell; its
# nonroot user is 65532, the uid deploy/ runs as.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="dljob" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/dljob /usr/local/bin/dljob
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/dljob"]
CMD ["serve"]
