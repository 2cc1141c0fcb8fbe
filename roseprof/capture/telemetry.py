"""GPU telemetry during a capture: clocks, utilisation, memory and power through NVML, sampled in a thread.

Nothing is sampled where NVML has no GPU (CPU machines). Timestamps are time.monotonic_ns(), the clock the
engine's step log uses, so the lane can be drawn against the run's own timeline.
"""

from __future__ import annotations

import threading
import time


class TelemetrySampler:
    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handles: list = []

    def start(self) -> bool:
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # noqa: BLE001 - no NVML, no driver or no GPU: nothing to sample
            return False
        if not self._handles:
            return False
        self._thread = threading.Thread(target=self._run, name="roseprof-telemetry", daemon=True)
        self._thread.start()
        return True

    def _sample(self, pynvml) -> None:
        now = time.monotonic_ns()
        for i, h in enumerate(self._handles):
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            self.samples.append(
                {
                    "t_ns": now,
                    "gpu": i,
                    "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                    "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                    "util_pct": util.gpu,
                    "mem_util_pct": util.memory,
                    "mem_used_mib": mem.used / 2**20,
                    "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                }
            )

    def _run(self) -> None:
        import pynvml

        while not self._stop.wait(self.interval_s):
            try:
                self._sample(pynvml)
            except Exception:  # noqa: BLE001 - a failed read skips one sample, it does not end the capture
                continue

    def stop(self) -> list[dict]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            try:
                import pynvml

                pynvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
        return self.samples
