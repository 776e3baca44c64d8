# syntax=docker/dockerfile:1
# dljob: the admission webhook and reconciler in one statically linked
# binary, in an image with nothing else (no base image, no shell, no libc
# to patch): the binary, the CA bundle it trusts, a non-root numeric user,
# and /etc/nsswitch.conf saying `hosts: files dns`. Member pods run
# `dljob wait-for-names` from this image and must resolve as the
# frameworks' images do, /etc/hosts first (a pod's hostAliases): glibc 2.33
# and later do so without the file, older ones asked DNS first; the file
# says it whatever glibc the binary links.
#
#   docker build -t ghcr.io/dljob/dljob:0.1.0 .      # BuildKit (docker >= 23)
#   podman build --build-arg BINARY=build -t ghcr.io/dljob/dljob:0.1.0 .
#     (podman 4.3 resolves a stage named by an argument only when the
#     argument is given, not from its default)
#
# Both build the binary in the `build` stage from the Rust image. `.ci/image`
# builds the same final stage from a binary it linked itself
# (`--build-arg BINARY=prebuilt`, which reads target/image/ from the
# context): no registry is needed there.
ARG BINARY=build

FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
# The whole context (see .dockerignore), so every target Cargo.toml declares
# (benches, tests) is present when cargo reads the manifest.
COPY . .
# +crt-static on the gnu target links glibc statically (its static libraries
# come with libc6-dev); the explicit --target keeps build scripts dynamic.
# Symbols are stripped (a panic's backtrace then shows addresses only).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    host="$(rustc -vV | sed -n 's/^host: //p')" \
    && RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_STRIP=symbols \
       cargo build --release --locked --bin dljob --target "$host" \
    && install -D -m 0755 "target/$host/release/dljob" /out/dljob \
    && install -D -m 0644 /etc/ssl/certs/ca-certificates.crt \
       /out/etc/ssl/certs/ca-certificates.crt \
    && printf 'hosts: files dns\n' > /out/etc/nsswitch.conf

# What .ci/image linked and staged: target/image/dljob,
# target/image/etc/ssl/certs/ca-certificates.crt and
# target/image/etc/nsswitch.conf.
FROM scratch AS prebuilt
COPY target/image/ /out/

FROM ${BINARY} AS binary

FROM scratch
LABEL org.opencontainers.image.title="dljob" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=binary /out/ /
# deploy/ runs as this uid, with a read-only root filesystem and no
# capabilities; the binary writes nothing to disk.
USER 65532:65532
EXPOSE 8443 9090
ENTRYPOINT ["/dljob", "serve"]
