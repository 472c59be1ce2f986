# syntax=docker/dockerfile:1
# Gristmill node image: gristd (proxy, target) and grist, run as an unprivileged user, with
# the Python ETL runtime targets start workers with. Build from the repository root:
#   docker build -t gristmill:0.1.0 .
# Deployment: deploy/README.md.

# --- build: release binaries from the locked dependency set --------------------------------
FROM rust:1.95-bookworm AS build
# aws-lc-sys (TLS) builds C with cmake.
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# .cargo/config.toml makes build/ cargo's output directory (target/ is a crate).
RUN cargo build --release --locked -p gristmill-daemon -p gristmill-cli --bins

# --- runtime -------------------------------------------------------------------------------
FROM debian:bookworm-slim
# python3 + numpy: ETL workers (etl.python = /usr/bin/python3); python3-venv: environments for
# ETL dependencies; util-linux (unshare, setpriv, prlimit) is in the base image for the sandbox.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 python3-numpy python3-venv \
 && rm -rf /var/lib/apt/lists/*
# A fixed uid/gid: the Kubernetes manifests run as 10001 (runAsUser, fsGroup).
RUN groupadd --system --gid 10001 gristmill \
 && useradd --system --uid 10001 --gid gristmill --home-dir /var/lib/gristmill \
      --shell /usr/sbin/nologin gristmill \
 && install -d -o gristmill -g gristmill -m 0700 /var/lib/gristmill
COPY --from=build /src/build/release/gristd /src/build/release/grist /usr/local/bin/
COPY LICENSE /usr/share/doc/gristmill/LICENSE
USER 10001:10001
WORKDIR /var/lib/gristmill
ENV GRISTD_STATE_DIR=/var/lib/gristmill/state
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/gristd"]
CMD ["proxy", "--listen", "0.0.0.0:8080"]
