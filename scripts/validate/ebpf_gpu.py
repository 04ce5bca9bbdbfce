# A GPU process that sends TCP over loopback and whose child reads a file with
# direct I/O; prints what gpudiag, run with the eBPF collector on
# 127.0.0.1:10910, counted for GPU 0 against what the process did.
#
#   gpudiag --collector.ebpf --collector.ebpf.program-stats --web.listen-address=127.0.0.1:10910 &
#   OUT=/tmp DUR=30 python3 scripts/validate/ebpf_gpu.py
import os, re, socket, subprocess, threading, time, urllib.request
import torch

def scrape():
    text = urllib.request.urlopen("http://127.0.0.1:10910/metrics").read().decode()
    def val(name, **labels):
        # Sums the series of name whose labels include labels, in any order.
        tot = 0.0
        for line in text.splitlines():
            m = re.match(r'(\w+)(?:\{(.*)\})? (\S+)$', line)
            if not m or m.group(1) != name:
                continue
            have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                tot += float(m.group(3))
        return tot
    return {
        "tcp_tx_loopback": val("gpudiag_gpu_process_tcp_transmit_bytes_total", gpu="0", scope="loopback"),
        "tcp_rx_loopback": val("gpudiag_gpu_process_tcp_receive_bytes_total", gpu="0", scope="loopback"),
        "block_read_bytes": val("gpudiag_gpu_process_block_io_bytes_total", gpu="0", op="read"),
        "block_read_requests": val("gpudiag_gpu_process_block_io_requests_total", gpu="0", op="read"),
        "ebpf_source": val("gpudiag_gpu_process_tcp_source_info", source="ebpf"),
        "bpf_run_seconds": val("gpudiag_ebpf_program_run_seconds_total"),
    }, text

x = torch.randn(4096, 4096, device="cuda")
# The first product loads cuBLAS's kernels from its library files, tens of MB
# of block reads of this process: done before the first reading, so that the
# reads counted are the child's alone.
y = x @ x
torch.cuda.synchronize()
path = "/var/tmp/gpudiag-ebpf-data"
with open(path, "wb") as f:
    f.write(os.urandom(1 << 20) * 256)
os.sync()
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
def serve():
    c, _ = srv.accept()
    while c.recv(1 << 20):
        pass
threading.Thread(target=serve, daemon=True).start()
time.sleep(6)  # seen on the GPU by the daemon, tracked by the eBPF collector
before, _ = scrape()
cli = socket.create_connection(("127.0.0.1", srv.getsockname()[1]))
buf = b"\0" * (1 << 20)
sent = reads = 0
end = time.time() + float(os.environ.get("DUR", "30"))
while time.time() < end:
    y = x @ x
    torch.cuda.synchronize()
    for _ in range(64):
        cli.sendall(buf); sent += len(buf)
    subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=1M", "count=64", "iflag=direct", f"skip={(reads * 64) % 192}"], check=True, capture_output=True)
    reads += 1
    time.sleep(0.2)
cli.close()
time.sleep(4)
after, text = scrape()
d = {k: after[k] - before[k] for k in after}
print(f"workload: sent {sent} bytes over loopback TCP; child dd read {reads * 64 << 20} bytes with direct I/O in {reads} runs")
print("gpudiag deltas for GPU 0:", {k: (round(v) if k != "bpf_run_seconds" else round(v, 4)) for k, v in d.items()})
print("tcp source ebpf:", after["ebpf_source"])
with open(os.environ["OUT"] + "/metrics_after.txt", "w") as f:
    f.write(text)
