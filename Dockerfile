# syntax=docker/dockerfile:1
# Multi-stage build of the gpudiag daemon. cgo is required (go-nvml and
# go-dcgm load libnvidia-ml.so.1 and libdcgm.so.4 with dlopen at run time), so
# the runtime image keeps glibc; neither library is baked in: the NVIDIA
# container runtime mounts the host driver's NVML into the container, and DCGM
# is reached through a hostengine (--collector.gpu.dcgm-address) or installed
# by whoever extends this image.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=unknown
RUN make build BINARY=/out/gpudiag VERSION="${VERSION}" REVISION="${REVISION}" BRANCH=""

FROM debian:bookworm-slim
COPY --from=build /out/gpudiag /usr/bin/gpudiag
# Ask the NVIDIA container runtime for the driver's management library only.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
EXPOSE 10910
# Runs as root by default because the per-process collectors read other
# users' /proc/<pid> files; with those disabled, run as any user
# (docker run --user 65534:65534 ...).
ENTRYPOINT ["/usr/bin/gpudiag"]
CMD ["--path.procfs=/host/proc", "--path.sysfs=/host/sys"]
