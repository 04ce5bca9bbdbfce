#!/usr/bin/env python3
"""Which NVML queries make NVML's share of the daemon's memory, on a real GPU.

Usage: nvml_memory.py OUTDIR
Opens NVML through pynvml in a fresh Python process and, after each step of
the queries the daemon makes (the same families in the same order as the GPU
collector's first sample), records the process's resident memory split into
anonymous and file pages (/proc/self/status RssAnon, RssFile) and whether
libcuda is mapped. A step's growth is that family's share. Writes
OUTDIR/nvml_memory.json and prints a table.
"""
import json, os, sys

import pynvml as N


def rss():
    out = {}
    with open('/proc/self/status') as f:
        for line in f:
            k, _, v = line.partition(':')
            if k in ('RssAnon', 'RssFile'):
                out[k] = int(v.split()[0]) / 1024
    with open('/proc/self/maps') as f:
        out['libcuda'] = 'libcuda' in f.read()
    return out


def attempt(fn):
    try:
        fn()
        return 'ok'
    except (N.NVMLError, TypeError, AttributeError) as e:
        return str(e)  # not supported here, or not in this pynvml


steps = []


def step(name, fn=None):
    res = attempt(fn) if fn else 'ok'
    steps.append(dict(step=name, result=res, **rss()))


def gpm(h):
    if not N.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
        raise N.NVMLError(N.NVML_ERROR_NOT_SUPPORTED)
    a, b = N.nvmlGpmSampleAlloc(), N.nvmlGpmSampleAlloc()
    N.nvmlGpmSampleGet(h, a)
    import time
    time.sleep(0.2)
    N.nvmlGpmSampleGet(h, b)
    mg = N.c_nvmlGpmMetricsGet_t()
    mg.version = N.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = 2
    mg.sample1, mg.sample2 = a, b
    mg.metrics[0].metricId = N.NVML_GPM_METRIC_SM_UTIL
    mg.metrics[1].metricId = N.NVML_GPM_METRIC_DRAM_BW_UTIL
    N.nvmlGpmMetricsGet(mg)


def events(h):
    es = N.nvmlEventSetCreate()
    N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, es)
    try:
        N.nvmlEventSetWait(es, 0)
    except N.NVMLError_Timeout:
        pass


def fabric(h):
    info = N.c_nvmlGpuFabricInfo_t()
    N.nvmlDeviceGetGpuFabricInfo(h, N.byref(info))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    step('python + pynvml imported')
    step('nvmlInit', N.nvmlInit)
    h = N.nvmlDeviceGetHandleByIndex(0)
    step('handle, name, UUID, PCI info', lambda: (N.nvmlDeviceGetName(h), N.nvmlDeviceGetUUID(h), N.nvmlDeviceGetPciInfo(h)))
    step('utilization, memory, power, temperature, clocks', lambda: (
        N.nvmlDeviceGetUtilizationRates(h), N.nvmlDeviceGetMemoryInfo(h), N.nvmlDeviceGetPowerUsage(h),
        N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU), N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM),
        N.nvmlDeviceGetCurrentClocksEventReasons(h)))
    step('compute and MPS processes', lambda: (N.nvmlDeviceGetComputeRunningProcesses(h), N.nvmlDeviceGetMPSComputeRunningProcesses(h)))
    step('PCIe link, replay counter', lambda: (N.nvmlDeviceGetCurrPcieLinkGeneration(h), N.nvmlDeviceGetCurrPcieLinkWidth(h), N.nvmlDeviceGetPcieReplayCounter(h)))
    step('ECC and MIG modes, ECC errors', lambda: (N.nvmlDeviceGetEccMode(h), N.nvmlDeviceGetMigMode(h),
                                                   N.nvmlDeviceGetTotalEccErrors(h, N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_VOLATILE_ECC)))
    step('energy counter', lambda: N.nvmlDeviceGetTotalEnergyConsumption(h))
    step('NVLink state', lambda: N.nvmlDeviceGetNvLinkState(h, 0))
    step('GPM support, two samples, metrics', lambda: gpm(h))
    step('XID event set, wait(0)', lambda: events(h))
    step('fabric info', lambda: fabric(h))
    json.dump(steps, open(f'{out}/nvml_memory.json', 'w'), indent=1)
    prev = None
    print(f"{'step':52s} {'anon MB':>8s} {'file MB':>8s} {'+anon':>7s} {'+file':>7s} libcuda result")
    for s in steps:
        da = s['RssAnon'] - prev['RssAnon'] if prev else 0
        df = s['RssFile'] - prev['RssFile'] if prev else 0
        print(f"{s['step']:52s} {s['RssAnon']:8.1f} {s['RssFile']:8.1f} {da:+7.1f} {df:+7.1f} {str(s['libcuda']):7s} {s['result']}")
        prev = s


if __name__ == '__main__':
    main()
