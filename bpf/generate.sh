#!/usr/bin/env bash
# Regenerates the BPF objects and their Go bindings (bpf2go) from the C
# sources in this directory. Not part of the build or CI: the outputs are
# committed. Installs what it needs from Debian (bookworm) when missing.
#
#   bash bpf/generate.sh            # recompile the .bpf.c files
#   bash bpf/generate.sh --vmlinux  # also refresh vmlinux.h from this kernel's BTF
#
# vmlinux.h only declares the kernel's types for the compiler; CO-RE
# relocates every field access to the running kernel's layout at load time,
# so it needs refreshing only to use a type or field it lacks.
set -euo pipefail
cd "$(dirname "$0")"

need=()
command -v clang >/dev/null || need+=(clang)
command -v llvm-strip >/dev/null || need+=(llvm)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
if [ "${1:-}" = --vmlinux ] && ! command -v bpftool >/dev/null; then
	need+=(bpftool)
fi
if [ ${#need[@]} -gt 0 ]; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

if [ "${1:-}" = --vmlinux ]; then
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > vmlinux.h
fi
rm -f ./*_bpfe[lb].go ./*_bpfe[lb].o
go generate ./
