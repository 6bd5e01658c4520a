# syntax=docker/dockerfile:1
# zerostate-worker image, with the zerostate-launch launcher. From the
# repository root:
#   CPU backend only (the default; all from Debian 12 packages):
#     docker build -f deploy/docker/worker.Dockerfile -t zerostate/worker:0.1.0 .
#   CUDA + NCCL backend (toolkit, cuBLAS and NCCL taken from NVIDIA's image;
#   the host's driver is mounted in by the NVIDIA container toolkit):
#     docker build -f deploy/docker/worker.Dockerfile --build-arg ZEROSTATE_CUDA=ON \
#       -t zerostate/worker:0.1.0-cuda .
# Only the stages that ZEROSTATE_CUDA selects are built (BuildKit).
ARG ZEROSTATE_CUDA=OFF
ARG CUDA_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04

FROM ${CUDA_IMAGE} AS cuda

FROM debian:12 AS build-OFF
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      cmake ninja-build g++ pkg-config \
      libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev \
      libabsl-dev prometheus-cpp-dev liburing-dev libgtest-dev libgmock-dev \
 && rm -rf /var/lib/apt/lists/*

FROM build-OFF AS build-ON
# CUDA 13 supports Debian 12; NCCL comes with NVIDIA's devel image.
COPY --from=cuda /usr/local/cuda /usr/local/cuda
COPY --from=cuda /usr/lib/x86_64-linux-gnu/libnccl* /usr/local/cuda/lib64/
COPY --from=cuda /usr/include/nccl*.h /usr/local/cuda/include/

FROM build-${ZEROSTATE_CUDA} AS build
ARG ZEROSTATE_CUDA
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DZEROSTATE_CUDA=${ZEROSTATE_CUDA} -DZEROSTATE_BENCH=OFF \
 && cmake --build /build --target zerostate-worker \
 && install -D -s /build/worker/zerostate-worker /out/zerostate-worker \
 && install -D -m 0755 deploy/launcher/zerostate-launch /out/zerostate-launch

FROM debian:12-slim AS runtime-OFF
# The libraries of `ldd zerostate-worker` by Debian package (checked by
# tests/deploy/docker_test.py); libc6, libgcc-s1 and libstdc++6 are in
# debian:12-slim. bash runs zerostate-launch.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libabsl20220623 libc-ares2 libcivetweb1 libgrpc++1.51 libgrpc29 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprotobuf32 libre2-9 \
      libssl3 zlib1g \
 && rm -rf /var/lib/apt/lists/*

FROM runtime-OFF AS runtime-ON
# cudart is linked statically; cuBLAS and NCCL are loaded from here.
COPY --from=cuda /usr/local/cuda/lib64/libcublas.so.13* /usr/local/cuda/lib64/libcublasLt.so.13* /usr/local/lib/zerostate/
COPY --from=cuda /usr/lib/x86_64-linux-gnu/libnccl.so.2* /usr/local/lib/zerostate/
RUN echo /usr/local/lib/zerostate > /etc/ld.so.conf.d/zerostate.conf && ldconfig
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility

FROM runtime-${ZEROSTATE_CUDA} AS runtime
RUN groupadd --system --gid 10001 zerostate \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin zerostate
COPY --from=build /out/zerostate-worker /out/zerostate-launch /usr/local/bin/
USER 10001:10001
# Metrics: 9470 + local rank.
EXPOSE 9470-9477
ENTRYPOINT ["/usr/local/bin/zerostate-launch"]
CMD ["--", "/usr/local/bin/zerostate-worker", "--config=/etc/zerostate/worker.textproto"]
