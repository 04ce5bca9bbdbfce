#!/bin/bash
# Issue 35 item 6 on a lent H200: the daemon at 97910755 beside a bf16 GEMM,
# /metrics and /diagnose, nvidia-smi for comparison, and the NVML call costs.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
X=$OUT/nvidia-smi-extra.txt
get() { python3 -c "import sys,urllib.request;sys.stdout.write(urllib.request.urlopen(sys.argv[1],timeout=10).read().decode())" "$1" > "$2" 2>&1; }
{ date -u; uname -a; nvidia-smi -L; nvidia-smi nvlink -s; echo ---; nvidia-smi nvlink -e; echo ---
  nvidia-smi --query-gpu=index,temperature.gpu,temperature.memory,memory.total,memory.reserved,memory.used,memory.free,ecc.mode.current,ecc.errors.corrected.volatile.total,ecc.errors.corrected.aggregate.total,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,utilization.encoder,utilization.decoder,mig.mode.current --format=csv
  nvidia-smi --query-gpu=clocks_event_reasons_counters.sw_power_cap,clocks_event_reasons_counters.sw_thermal_slowdown,clocks_event_reasons_counters.hw_thermal_slowdown,clocks_event_reasons_counters.hw_power_brake_slowdown,clocks_event_reasons_counters.sync_boost --format=csv
} > $X 2>&1
./gpudiag --web.listen-address=:10910 --sample.interval=1s > $OUT/daemon.log 2>&1 &
D=$!
sleep 15; get http://127.0.0.1:10910/metrics $OUT/metrics-idle.txt
python3 - >> $OUT/daemon.log 2>&1 <<'PY' &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
t0 = time.time(); n = 0
while time.time() - t0 < 60:
    for _ in range(20): a @ b
    torch.cuda.synchronize(); n += 20
print("gemm: %d products in %.1f s, %.0f TFLOP/s" % (n, time.time() - t0, n * 2 * 8192**3 / (time.time() - t0) / 1e12))
PY
G=$!
sleep 45; get http://127.0.0.1:10910/metrics $OUT/metrics-gemm.txt
get "http://127.0.0.1:10910/diagnose?format=json" $OUT/diagnose.json
wait $G
{ echo "--- after the GEMM"; nvidia-smi --query-gpu=clocks_event_reasons_counters.sw_power_cap,clocks_event_reasons_counters.sw_thermal_slowdown,clocks_event_reasons_counters.hw_thermal_slowdown,temperature.memory --format=csv; nvidia-smi -q -d PERFORMANCE; } >> $X 2>&1
get http://127.0.0.1:10910/metrics $OUT/metrics-end.txt
kill $D; wait $D
echo "=== identity labels" >> $OUT/daemon.log
./gpudiag --web.listen-address=:10911 --sample.interval=1s --metrics.gpu-identity-labels >> $OUT/daemon.log 2>&1 &
D=$!; sleep 12
get http://127.0.0.1:10911/metrics /tmp/m.txt; grep -E '^gpudiag_gpu_(power_watts|info|nvlink_errors_total|memory_temperature_celsius)\{' /tmp/m.txt | head -8 >> $OUT/metrics-end.txt
kill $D; wait $D
nvidia-smi -q > $OUT/nvidia-smi-q.txt 2>&1
GPUDIAG_NVML_CALL_COST_SECONDS=30 GPUDIAG_NVML_CALL_COST_OUT=/tmp/cc.json ./nvmlcost.test -test.run NVMLCallCost -test.v > $OUT/callcost.txt 2>&1
cat /tmp/cc.json >> $OUT/callcost.txt
ls -la $OUT
