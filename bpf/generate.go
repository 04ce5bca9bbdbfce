package bpf

// The objects are generated and committed, so building the daemon needs no
// clang. After changing a .bpf.c or tracking.h, regenerate with
// `bash bpf/generate.sh` (installs clang, llvm, libbpf-dev and bpftool from
// Debian when missing). Both byte orders are built so that the package
// compiles for every GOARCH; CO-RE adapts the objects to the running kernel.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -type tracked_process tracking tracking.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -type disk_key -type disk_latency -type blockio_state -type process_io_key -type process_io blockIO blockio.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -type tcp_traffic_bytes tcp tcp.bpf.c
