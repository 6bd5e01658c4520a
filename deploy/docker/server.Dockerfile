# syntax=docker/dockerfile:1
# zerostate-server image. Build from the repository root:
#   docker build -f deploy/docker/server.Dockerfile -t zerostate/server:0.1.0 .
# Stage 1 compiles with Debian 12's -dev packages; stage 2 is debian:12-slim
# with only the shared libraries the binary loads (from `ldd`, checked by
# tests/deploy/docker_test.py), no compiler, no package headers, non-root.

FROM debian:12 AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      cmake ninja-build g++ pkg-config \
      libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev \
      libabsl-dev prometheus-cpp-dev liburing-dev libgtest-dev libgmock-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DZEROSTATE_CUDA=OFF -DZEROSTATE_BENCH=OFF \
 && cmake --build /build --target zerostate-server zerostate \
 && install -D -s /build/server/zerostate-server /out/zerostate-server \
 && install -D -s /build/server/zerostate /out/zerostate

FROM debian:12-slim AS runtime
# The libraries of `ldd zerostate-server` by Debian package; libc6,
# libgcc-s1 and libstdc++6 are in debian:12-slim already. liburing2 is for
# the NVMe tier (io_uring).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libabsl20220623 libc-ares2 libcivetweb1 libgrpc++1.51 libgrpc29 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprotobuf32 libre2-9 \
      libssl3 zlib1g liburing2 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 zerostate \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/zerostate \
      --no-create-home --shell /usr/sbin/nologin zerostate \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/zerostate
COPY --from=build /out/zerostate-server /usr/local/bin/zerostate-server
# The operator's tool: `zerostate health` is the Kubernetes probe, `zerostate
# ckpt` lists, verifies and exports checkpoints.
COPY --from=build /out/zerostate /usr/local/bin/zerostate
USER 10001:10001
WORKDIR /var/lib/zerostate
# gRPC (with health checking and reflection), the TCP data plane (with
# --data_listen=0.0.0.0:7071) and Prometheus metrics.
EXPOSE 7070 7071 9464
ENTRYPOINT ["/usr/local/bin/zerostate-server"]
# TLS with a certificate mounted at /etc/zerostate/tls (add
# --tls_client_ca for mutual TLS); --plaintext only on a trusted network.
CMD ["--listen=0.0.0.0:7070", "--metrics_listen=0.0.0.0:9464", \
     "--tls_cert=/etc/zerostate/tls/tls.crt", "--tls_key=/etc/zerostate/tls/tls.key"]
