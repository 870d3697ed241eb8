"""What NVML answers with and without attaching to the GPUs, and what each costs, in-process:
`python bench/nvml_probe.py` prints, for nvmlInitWithFlags(NO_ATTACH) and for nvmlInit_v2,
the device count, each GPU's compute capability (or the error code) and the median time of
init + count + capabilities + shutdown over 20 runs, after one warm-up."""

from __future__ import annotations

import ctypes
import json
import statistics
import time


def session(lib: ctypes.CDLL, flags: int | None) -> dict[str, object]:
    status = lib.nvmlInit_v2() if flags is None else lib.nvmlInitWithFlags(flags)
    if status:
        return {"init": status}
    try:
        count = ctypes.c_uint(0)
        got = lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
        caps = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            h = lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle))
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            c = lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major),
                                                       ctypes.byref(minor))
            caps.append([h, c, major.value, minor.value])
        return {"count_status": got, "count": count.value, "caps": caps}
    finally:
        lib.nvmlShutdown()


def main() -> None:
    t0 = time.perf_counter_ns()
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    out: dict[str, object] = {"dlopen_ms": (time.perf_counter_ns() - t0) / 1e6}
    for label, flags in (("no_attach", 2), ("init_v2", None)):
        first = session(lib, flags)
        times = []
        for _ in range(20):
            t = time.perf_counter_ns()
            session(lib, flags)
            times.append((time.perf_counter_ns() - t) / 1e6)
        out[label] = {"answer": first, "median_ms": round(statistics.median(times), 3)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
