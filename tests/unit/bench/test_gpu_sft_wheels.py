"""bench/gpu_sft.py --wheels: what an offline GPU host installs from the carried wheels, and that datasets can
still fingerprint what those packages hold (a wheel folder not named site-packages broke that on pyarrow)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.factories import make_wheel

BENCH = Path(__file__).resolve().parents[3] / "bench" / "gpu_sft.py"


def test_wheels_install_what_the_host_lacks_keep_what_it_has_and_report_unmet_requirements(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    # A module holding something no pickler can copy, as pyarrow's does: it must be pickled by name.
    code = "RUNNING = (n for n in range(3))\nVALUE = 7\n"
    requires = ("packaging", "pip<1", "no-such-dist-bashgym>=1")
    make_wheel(wheels, "bashgym_probe_pkg", "1.0", requires=requires, code=code)
    make_wheel(wheels, "packaging", "0.1")  # the host's packaging is newer: its wheel is left out
    script = textwrap.dedent(
        f"""
        import importlib.util, json, sys
        from pathlib import Path
        spec = importlib.util.spec_from_file_location("gpu_sft", {str(BENCH)!r})
        bench = sys.modules["gpu_sft"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
        record = bench.install_wheels(Path({str(wheels)!r}))
        import packaging, bashgym_probe_pkg
        from datasets.fingerprint import Hasher

        def fingerprinted():  # a nested function naming the module, like datasets' table reducer
            def rebuild():
                return bashgym_probe_pkg.VALUE
            return rebuild

        Hasher.hash(fingerprinted())
        print(json.dumps({{**record, "probe": bashgym_probe_pkg.__file__, "packaging": packaging.__version__}}))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    assert record["check"] == "wheels"
    assert record["installed"] == ["bashgym-probe-pkg 1.0"]
    assert [line.split(" ")[0] for line in record["host_kept"]] == ["packaging"]
    assert record["packaging"] != "0.1"
    assert record["missing"] == ["no-such-dist-bashgym>=1 (for bashgym-probe-pkg)"]
    assert len(record["mismatched"]) == 1 and record["mismatched"][0].startswith("bashgym-probe-pkg needs pip<1")
    assert "site-packages" in record["probe"]


def test_an_empty_wheel_folder_is_refused_with_what_to_put_there(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--tiny", "--wheels", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1
    assert f"--wheels {tmp_path}: no .whl files there." in proc.stderr
