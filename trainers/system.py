"""System metrics of a run: CPU and memory (psutil) and, where NVML answers, each GPU's utilisation, memory and
power, sampled by a daemon thread into `system.*` series. A launched run's trainer and a tracked run's client both
start one (trainers/runner.py, track/run.py); this module imports no torch and nothing else of BashGym, so the
tracking client may import it as the daemon imports trainers.contracts.

    system.cpu_percent            this process and its children, percent of one core (400 is four cores busy)
    system.memory_rss_mb          this process and its children, resident memory in MiB
    system.host_cpu_percent       the whole machine, percent of all its cores
    system.host_memory_percent    the whole machine, memory in use
    system.gpu.N.utilization      device N, percent of the last sample period a kernel ran (NVML)
    system.gpu.N.memory_used_mb   device N, memory in use in MiB, by every process on it
    system.gpu.N.power_w          device N, power draw in watts

N counts the devices the process sees (CUDA_VISIBLE_DEVICES, in its order), as torch's cuda:N does. The ledger
holds one value per metric and step, so a sample is recorded at the run's latest step, at most once per step and
once per interval: a run whose steps are longer than the interval records one sample a step.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import psutil

log = logging.getLogger("bashgym.system")

DEFAULT_INTERVAL_S = 10.0
INTERVAL_ENV = "BASHGYM_SYSTEM_METRICS_S"  # a launched run's interval, set by the daemon (settings.system_metrics_s)
MIB = 1024 * 1024


def interval_from(environ: dict[str, str]) -> float:
    """The interval a launched trainer samples at: the daemon's setting, passed in its environment; 0 turns it off."""
    raw = environ.get(INTERVAL_ENV, "")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_INTERVAL_S
    except ValueError:
        log.warning("%s=%r is not a number of seconds; sampling every %g s.", INTERVAL_ENV, raw, DEFAULT_INTERVAL_S)
        return DEFAULT_INTERVAL_S


def load_nvml() -> ModuleType | None:
    """pynvml (the nvidia-ml-py package), initialised; None where it is missing or no NVIDIA driver answers."""
    try:
        nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:  # no package, no libnvidia-ml, no driver: a machine without GPUs records CPU and memory only
        return None
    return nvml


class SystemSampler:
    """Samples every `interval_s` on a daemon thread and hands `report(step, values)` the sample, at `step()`."""

    def __init__(
        self,
        report: Callable[[int, dict[str, float]], None],
        step: Callable[[], int],
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        visible_devices: str | None = None,
        nvml: ModuleType | None = None,
    ) -> None:
        self.report = report
        self.step = step
        self.interval_s = interval_s
        self._nvml = nvml
        self._visible_devices = visible_devices
        self._devices: list[Any] = []
        self._process = psutil.Process()
        self._children: dict[int, psutil.Process] = {}
        self._reported_step = -1
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def is_on(self) -> bool:
        return self.interval_s > 0

    @property
    def last_step(self) -> int:
        """The step of the last sample recorded; -1 before the first."""
        return self._reported_step

    def start(self) -> None:
        if not self.is_on:
            return
        if self._nvml is None:
            self._nvml = load_nvml()
        if self._nvml is not None:
            self._devices = visible_handles(self._nvml, self._visible_devices)
        self.sample()  # psutil's CPU percentages count from their first call: this one sets the mark
        self._thread = threading.Thread(target=self._loop, name="bashgym-system-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Record a last sample (a run shorter than the interval still has one) and end the thread."""
        if self._thread is None:
            return
        self._stopping.set()
        self._thread.join()
        self._thread = None
        self._record()
        if self._nvml is not None:
            with contextlib.suppress(self._nvml.NVMLError):  # the driver went away meanwhile: nothing to release
                self._nvml.nvmlShutdown()

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self._record()

    def _record(self) -> None:
        step = self.step()
        if step <= self._reported_step:
            return  # sampled at this step already: the ledger keeps one value per metric and step
        try:
            values = self.sample()
            self.report(step, values)
        except Exception:  # a failed sample must never end the training it watches
            log.exception("System metrics at step %d were not recorded", step)
            return
        self._reported_step = step

    def sample(self) -> dict[str, float]:
        """One sample of every series this machine has."""
        values = {
            "system.cpu_percent": self._process_cpu_percent(),
            "system.memory_rss_mb": self._process_rss() / MIB,
            "system.host_cpu_percent": psutil.cpu_percent(),
            "system.host_memory_percent": psutil.virtual_memory().percent,
        }
        for n, handle in enumerate(self._devices):
            values.update(self._device(n, handle))
        return {name: round(float(value), 3) for name, value in values.items()}

    def _process_cpu_percent(self) -> float:
        total = float(self._process.cpu_percent())
        try:
            children = self._process.children(recursive=True)
        except psutil.Error:
            children = []
        alive = {child.pid for child in children}
        self._children = {pid: p for pid, p in self._children.items() if pid in alive}
        for child in children:
            known = self._children.setdefault(child.pid, child)  # cpu_percent counts from this object's last call
            try:
                total += known.cpu_percent()
            except psutil.Error:
                continue  # the child ended between the listing and the reading: its share is gone with it
        return total

    def _process_rss(self) -> float:
        rss = float(self._process.memory_info().rss)
        for child in list(self._children.values()):
            try:
                rss += child.memory_info().rss
            except psutil.Error:
                continue  # ended since the listing
        return rss

    def _device(self, n: int, handle: Any) -> dict[str, float]:
        nvml = self._nvml
        assert nvml is not None
        readings: dict[str, Callable[[], float]] = {
            f"system.gpu.{n}.utilization": lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
            f"system.gpu.{n}.memory_used_mb": lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used / MIB,
            f"system.gpu.{n}.power_w": lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000,  # milliwatts
        }
        values: dict[str, float] = {}
        for name, read in readings.items():
            try:
                values[name] = float(read())
            except nvml.NVMLError:
                continue  # a device that does not measure this (power on some boards): the series is left out
        return values


def visible_handles(nvml: ModuleType, visible_devices: str | None) -> list[Any]:
    """NVML's handles of the devices CUDA shows this process, in CUDA's order: NVML itself lists every device of
    the machine, whichever the run was given. Entries are indices or UUIDs; as in CUDA, the list stops at the first
    entry naming no device."""
    try:
        count = nvml.nvmlDeviceGetCount()
        if visible_devices is None:
            return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        handles = []
        for entry in (part.strip() for part in visible_devices.split(",")):
            if entry.isdigit() and int(entry) < count:
                handles.append(nvml.nvmlDeviceGetHandleByIndex(int(entry)))
            elif entry.startswith(("GPU-", "MIG-")):
                handles.append(nvml.nvmlDeviceGetHandleByUUID(entry))
            else:
                break
        return handles
    except nvml.NVMLError as exc:
        log.warning("NVML lists no devices (%s); system metrics go without GPU series.", exc)
        return []
