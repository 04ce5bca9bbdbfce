# syntax=docker/dockerfile:1
# Multi-stage build of the gpudiag daemon. cgo is required (go-nvml and
# go-dcgm load libnvidia-ml.so.1 and libdcgm.so.4 with dlopen at run time), so
# the runtime image keeps glibc; neither library is baked in: the NVIDIA
# container runtime mounts the host driver's NVML into the container, and DCGM
# is reached through a hostengine (--collector.gpu.dcgm-address) or installed
# by whoever extends this image.
#
#   docker build -t gpudiag \
#     --build-arg VERSION="$(git describe --tags --always --dirty)" \
#     --build-arg REVISION="$(git rev-parse HEAD)" .
#
# The builder is pinned to the Go release go.mod names: the official golang
# image sets GOTOOLCHAIN=local, so an older Go there refuses to build this
# module ("go.mod requires go >= ..."). Bump GO_VERSION with go.mod's go line
# (go test ./deploy checks that they agree).
ARG GO_VERSION=1.26.11

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# .git is not in the build context (.dockerignore): the version comes from
# these build arguments, not from git.
ARG VERSION=dev
ARG REVISION=unknown
RUN make build BINARY=/out/gpudiag VERSION="${VERSION}" REVISION="${REVISION}" BRANCH=""

# The same Debian release as the builder: the binary links the builder's glibc
# dynamically and needs at least that version at run time. bookworm-slim
# follows Debian 12's point releases and security updates; for a reproducible
# image pin a dated tag (debian:bookworm-YYYYMMDD-slim) or a digest
# (debian:bookworm-slim@sha256:...).
FROM debian:bookworm-slim
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="gpudiag" \
      org.opencontainers.image.source="https://github.com/gpudiag/gpudiag" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/gpudiag /usr/bin/gpudiag
# Ask the NVIDIA container runtime for the driver's management library only.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
EXPOSE 10910
# Runs as root by default because the per-process collectors (gpuprocess,
# ncclproc, nccl, and tcp's socket-to-process mapping) read other users'
# /proc/<pid> files; with those disabled, run as any user:
#   docker run --user 65534:65534 ... gpudiag --path.procfs=/host/proc \
#     --path.sysfs=/host/sys --no-collector.gpuprocess \
#     --no-collector.ncclproc --no-collector.nccl --no-collector.tcp
ENTRYPOINT ["/usr/bin/gpudiag"]
CMD ["--path.procfs=/host/proc", "--path.sysfs=/host/sys"]
