"""The Slurm lane's pure parts: the batch script it renders, and what it reads from scontrol, sacct and squeue."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from bashgym.client.errors import RuleRejected
from bashgym.client.specs import ClusterSpec
from bashgym.daemon.api.clusters import local_shared_dir
from bashgym.daemon.host_paths import PathRefused
from bashgym.daemon.lanes.slurm_jobs import (
    Cluster,
    parse_duration_s,
    parse_exit_code,
    parse_found_jobs,
    parse_sacct,
    parse_scontrol,
    parse_submitted,
    render_script,
    sbatch_options,
    signal_grace_s,
    tres_gpus,
)
from bashgym.daemon.settings import Settings
from bashgym.trainers.contracts.request import InvalidRequest, parse_compute_target
from pydantic import ValidationError


def cluster(**overrides: object) -> Cluster:
    spec = ClusterSpec.model_validate(
        {
            "cluster_id": "hpc",
            "partition": "gpu",
            "account": "ml-lab",
            "qos": "normal",
            "gpu_type": "a100",
            "gpus_per_node": 2,
            "max_nodes": 4,
            "time_limit_min": 120,
            "shared_dir": "/shared/bashgym",
            "python": "/shared/venv/bin/python",
            **overrides,
        }
    )
    return Cluster.from_record(spec.model_dump())


def test_the_job_is_named_commented_and_limited_honestly() -> None:
    options = sbatch_options(cluster(), run_id="run-1", attempt_id="run-1.a1", submission=2, nodes=1)
    assert options == [
        "--job-name=bashgym-run-1",
        "--comment=bashgym:run-1:run-1.a1:2",
        "--partition=gpu",
        "--account=ml-lab",
        "--qos=normal",
        "--time=120",
        "--nodes=1",
        "--ntasks-per-node=1",
        "--gpus-per-node=a100:2",
        "--chdir=/shared/bashgym/run-1",
        "--output=/shared/bashgym/run-1/training.log",
        "--open-mode=append",
        "--signal=B:USR1@300",
        "--requeue",
    ]
    bare = sbatch_options(
        cluster(account=None, qos=None, gpu_type=None, gpus_per_node=0, time_limit_min=1),
        run_id="r",
        attempt_id="r.a1",
        submission=1,
        nodes=1,
    )
    assert not any(o.startswith(("--account", "--qos", "--gpus")) for o in bare)
    assert "--signal=B:USR1@15" in bare


def test_the_time_limit_warning_is_a_quarter_of_the_limit_within_bounds() -> None:
    assert [signal_grace_s(m) for m in (1, 2, 20, 600)] == [15, 30, 300, 300]


@pytest.mark.parametrize("nodes", [1, 3])
def test_the_script_is_valid_bash_and_holds_no_secret_or_unquoted_path(nodes: int, tmp_path: Path) -> None:
    script = render_script(
        cluster(), run_id="run-1", attempt_id="run-1.a1", submission=1, nodes=nodes, distributed=nodes > 1,
        resume=False,
    )  # fmt: skip
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    checked = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    assert script.startswith("#!/bin/bash\n#SBATCH --job-name=bashgym-run-1\n")
    assert "TOKEN" not in script and "HF_" not in script
    assert 'echo "$code" > exit_code.tmp && mv exit_code.tmp exit_code' in script
    if nodes == 1:
        assert (
            "srun --nodes=1 --ntasks=1 --kill-on-bad-exit=1 /shared/venv/bin/python -u -m bashgym.trainers " in script
        )
    else:
        assert '--nodes="$SLURM_NNODES" --ntasks-per-node=1' in script
        assert "bashgym.trainers.launch" in script and '--machine-rank "$SLURM_NODEID"' in script
        assert "machine-$SLURM_NODEID" in script


def test_a_resumed_or_requeued_job_goes_on_from_its_checkpoint() -> None:
    fresh = render_script(cluster(), run_id="r", attempt_id="r.a1", submission=1, nodes=1, distributed=False,
                          resume=False)  # fmt: skip
    resumed = render_script(cluster(), run_id="r", attempt_id="r.a1", submission=2, nodes=1, distributed=False,
                            resume=True)  # fmt: skip
    assert 'resume=""' in fresh and "resume=--resume" in resumed
    assert 'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] || [ -e started-1 ]; then resume=--resume; fi' in fresh


def test_scontrol_lines_are_read_into_job_states() -> None:
    pending = parse_scontrol(
        "JobId=42 JobName=bashgym-run-1 UserId=ml(1000) JobState=PENDING Reason=Priority Dependency=(null) "
        "Requeue=1 Restarts=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=00:05:00 NodeList=(null) "
        "TRES=cpu=1,mem=100M,node=1,billing=1 Comment=bashgym:run-1:run-1.a1:1"
    )
    assert pending is not None
    assert (pending.job_id, pending.state, pending.reason, pending.is_waiting, pending.nodes) == (
        "42", "PENDING", "Priority", True, ""
    )  # fmt: skip
    ended = parse_scontrol(
        "JobId=43 JobState=TIMEOUT Reason=TimeLimit Restarts=1 ExitCode=0:15 RunTime=1-02:03:04 "
        "NodeList=bgnode AllocTRES=cpu=2,node=1,gres/gpu=2,gres/gpu:a100=2"
    )
    assert ended is not None and not ended.is_active
    assert (ended.state, ended.exit_code, ended.elapsed_s, ended.gpus, ended.restarts, ended.nodes) == (
        "TIMEOUT", 143, 93784, 2, 1, "bgnode"
    )  # fmt: skip
    assert parse_scontrol("slurm_load_jobs error: Invalid job id specified") is None


def test_sacct_lines_are_read_into_job_states() -> None:
    text = "44|CANCELLED by 1000|None|0:15|00:01:05|billing=1,cpu=1,gres/gpu=1,node=1|0|bgnode\n"
    job = parse_sacct(text, "44")
    assert job is not None
    assert (job.state, job.exit_code, job.elapsed_s, job.gpus, job.nodes) == ("CANCELLED", 143, 65, 1, "bgnode")
    assert parse_sacct(text, "45") is None


def test_durations_codes_and_tres_are_parsed_as_slurm_writes_them() -> None:
    assert [parse_duration_s(t) for t in ("00:00:09", "01:02", "2-00:00:01", "INVALID")] == [9, 62, 172801, 0]
    assert [parse_exit_code(t) for t in ("0:0", "2:0", "0:9", "x")] == [0, 2, 137, None]
    assert [tres_gpus(t) for t in ("cpu=1,node=1", "gres/gpu:a100=3", "gres/gpu=2,gres/gpu:a100=2")] == [0, 3, 2]


def test_a_run_finds_only_jobs_of_its_own_submission() -> None:
    listed = "41|bashgym:run-1:run-1.a1:1\n42|bashgym:run-1:run-1.a1:2\n43|someone else\n"
    assert parse_found_jobs(listed, "bashgym:run-1:run-1.a1:2") == ["42"]
    assert parse_found_jobs(listed, "bashgym:run-1:run-1.a1:3") == []
    assert parse_submitted("42\n") == "42" and parse_submitted("42;hpc\n") == "42"
    assert parse_submitted("sbatch: error: invalid partition") is None


def test_the_compute_target_names_a_cluster_or_is_refused_saying_how() -> None:
    assert parse_compute_target("slurm:hpc") == ("slurm", "hpc")
    for target in ("slurm:", "slurm:../etc", "slurm:a b"):
        with pytest.raises(InvalidRequest, match="does not name a cluster; use slurm:<cluster_id>"):
            parse_compute_target(target)
    with pytest.raises(InvalidRequest, match="`slurm:<cluster_id>`"):
        parse_compute_target("pbs:hpc")


def test_a_cluster_spec_keeps_login_device_and_access_consistent() -> None:
    assert (
        ClusterSpec.model_validate(
            {"cluster_id": "c", "partition": "p", "time_limit_min": 5, "shared_dir": "/s", "login_device_id": "login1"}
        ).access
        == "ssh"
    )
    with pytest.raises(ValidationError, match="set login_device_id"):
        ClusterSpec.model_validate(
            {"cluster_id": "c", "partition": "p", "time_limit_min": 5, "shared_dir": "/s", "access": "ssh"}
        )
    with pytest.raises(ValidationError, match="shared_dir"):
        ClusterSpec.model_validate({"cluster_id": "c", "partition": "p", "time_limit_min": 5, "shared_dir": "rel"})


def test_a_local_cluster_needs_the_operators_shared_root(tmp_path: Path) -> None:
    unset = Settings(home=tmp_path / "home")
    with pytest.raises(RuleRejected, match="BASHGYM_SLURM_SHARED_ROOT is not set"):
        local_shared_dir(unset, str(tmp_path))
    root = tmp_path / "shared"
    (root / "team").mkdir(parents=True)
    settings = Settings(home=tmp_path / "home", slurm_shared_root=root)
    assert local_shared_dir(settings, str(root / "team")) == (root / "team").resolve()
    with pytest.raises(PathRefused, match="outside BASHGYM_SLURM_SHARED_ROOT"):
        local_shared_dir(settings, str(tmp_path))
    with pytest.raises(RuleRejected, match="is not a directory"):
        local_shared_dir(settings, str(root / "missing"))
