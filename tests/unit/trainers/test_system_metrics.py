"""The system sampler (issue 53, item 5): psutil is read for real; NVML, which needs an NVIDIA driver, is the one
stand-in: a module object answering as pynvml does for a machine with two GPUs, one without a power reading."""

from __future__ import annotations

import threading
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from bashgym.trainers.system import INTERVAL_ENV, SystemSampler, interval_from, visible_handles

from tests.support.helpers import eventually

MIB = 1024 * 1024


def fake_nvml() -> ModuleType:
    """pynvml's calls the sampler makes, for two devices: 0 (UUID GPU-aaa) draws 70.5 W; 1 (GPU-bbb) has no power
    sensor (NVML_ERROR_NOT_SUPPORTED) and 40% utilisation with 2 GiB in use."""
    nvml = ModuleType("pynvml")
    devices = {
        0: {"uuid": "GPU-aaa", "gpu": 95, "used": 30 * 1024 * MIB, "power_mw": 70500},
        1: {"uuid": "GPU-bbb", "gpu": 40, "used": 2 * 1024 * MIB, "power_mw": None},
    }

    class NVMLError(Exception):
        pass

    def power(handle: dict[str, Any]) -> int:
        if handle["power_mw"] is None:
            raise NVMLError("Not Supported")
        return int(handle["power_mw"])

    nvml.NVMLError = NVMLError  # type: ignore[attr-defined]
    nvml.shut = []  # type: ignore[attr-defined]
    nvml.nvmlInit = lambda: None  # type: ignore[attr-defined]
    nvml.nvmlShutdown = lambda: nvml.shut.append(True)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCount = lambda: len(devices)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = lambda i: devices[i]  # type: ignore[attr-defined]
    by_uuid = {d["uuid"]: d for d in devices.values()}
    nvml.nvmlDeviceGetHandleByUUID = lambda u: by_uuid[u]  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=h["gpu"], memory=0)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(used=h["used"], total=80 * 1024 * MIB)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetPowerUsage = power  # type: ignore[attr-defined]
    return nvml


class Reports:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: list[tuple[int, dict[str, float]]] = []

    def __call__(self, step: int, values: dict[str, float]) -> None:
        with self.lock:
            self.got.append((step, values))


def test_a_sample_holds_this_processs_cpu_and_memory_and_each_visible_gpus_use() -> None:
    reports = Reports()
    nvml = fake_nvml()
    sampler = SystemSampler(reports, lambda: 7, interval_s=3600, visible_devices="1,0", nvml=nvml)
    sampler.start()
    sampler.stop()
    assert nvml.shut == [True]  # type: ignore[attr-defined]
    [(step, values)] = reports.got  # the interval never passed: the last sample, taken when the run ended
    assert step == 7
    assert values["system.memory_rss_mb"] > 1  # this Python, read by psutil
    assert values["system.cpu_percent"] >= 0 and 0 <= values["system.host_cpu_percent"] <= 100
    assert 0 < values["system.host_memory_percent"] < 100
    # CUDA_VISIBLE_DEVICES=1,0: cuda:0 is the machine's device 1, which measures no power.
    gpus = {name: value for name, value in values.items() if name.startswith("system.gpu.")}
    assert gpus == {
        "system.gpu.0.utilization": 40.0,
        "system.gpu.0.memory_used_mb": 2048.0,
        "system.gpu.1.utilization": 95.0,
        "system.gpu.1.memory_used_mb": 30720.0,
        "system.gpu.1.power_w": 70.5,
    }


def test_the_thread_samples_at_most_once_a_step_at_the_latest_step() -> None:
    reports = Reports()
    step = [0]

    def latest() -> int:
        return step[0]

    sampler = SystemSampler(reports, latest, interval_s=0.005, nvml=fake_nvml())
    sampler.start()
    try:
        eventually("a sample at step 0", lambda: len(reports.got) >= 1)
        for n in (1, 2, 3):
            step[0] = n
            eventually(f"a sample at step {step[0]}", lambda: reports.got[-1][0] == step[0])
    finally:
        sampler.stop()
    recorded = [s for s, _ in reports.got]
    assert recorded == sorted(set(recorded)) == [0, 1, 2, 3], "one sample a step, never two at one step"


def test_visible_devices_by_uuid_and_a_list_that_stops_at_an_unknown_entry() -> None:
    nvml = fake_nvml()
    assert [h["uuid"] for h in visible_handles(nvml, "GPU-bbb")] == ["GPU-bbb"]
    assert [h["uuid"] for h in visible_handles(nvml, "0,7,1")] == ["GPU-aaa"]  # CUDA stops at device 7
    assert visible_handles(nvml, "") == [] and len(visible_handles(nvml, None)) == 2


def test_an_interval_of_zero_records_nothing_and_a_sample_that_fails_never_reaches_the_trainer() -> None:
    reports = Reports()
    off = SystemSampler(reports, lambda: 1, interval_s=0, nvml=fake_nvml())
    off.start()
    off.stop()
    assert reports.got == [] and not off.is_on

    def broken(step: int, values: dict[str, float]) -> None:
        raise OSError("metrics.jsonl: no space left on device")

    failing = SystemSampler(broken, lambda: 1, interval_s=3600, nvml=fake_nvml())
    failing.start()
    failing.stop()  # logged, not raised: the training it watches goes on


@pytest.mark.parametrize(("raw", "seconds"), [("", 10.0), ("2.5", 2.5), ("0", 0.0), ("-3", 0.0), ("often", 10.0)])
def test_a_launched_trainer_reads_its_interval_from_the_daemons_setting(raw: str, seconds: float) -> None:
    assert interval_from({INTERVAL_ENV: raw} if raw else {}) == seconds
