"""What a process the daemon starts gets of its environment: an allow-list, never a secret, the Hub token only to
a run that pushes (README, "Security model", Secrets)."""

from __future__ import annotations

import json
from pathlib import Path

from bashgym.daemon.settings import HUB_TOKEN_ENV, Settings, child_environment, load_settings
from bashgym.trainers import hub

# What any child gets of the daemon's environment below, and the rest, which no child gets.
HANDED_ON = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/ops",
    "LC_ALL": "C.UTF-8",
    "HF_HOME": "/cache/hf",
    "HF_ENDPOINT": "http://hub.internal",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "OMP_NUM_THREADS": "4",
}
DAEMON_ENV = {
    **HANDED_ON,
    "HF_TOKEN": "hf_" + "Ua1" * 12,
    "HUGGING_FACE_HUB_TOKEN": "hf_" + "Ub2" * 12,
    "OPENAI_API_KEY": "sk-" + "Uc3" * 10,
    "BASHGYM_DISCORD_TOKEN": "MTAx" + "Ud4" * 20,
    "BASHGYM_PORT": "8321",
    "DATABASE_URL": "postgres://ops:secret@db/ops",
    "TORCH_HUB_TOKEN": "th-" + "Ue5" * 10,  # under an allowed prefix, but named a secret below
    "WANDB_MODE": "offline",
}


def _settings(tmp_path: Path, **environ: str) -> Settings:
    providers = json.dumps({"acme": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "OPENAI_API_KEY"}})
    return load_settings({"BASHGYM_PROVIDERS": providers, **environ}, home=str(tmp_path))


def test_a_child_gets_the_allow_listed_variables_and_no_secret(tmp_path: Path) -> None:
    settings = load_settings({"BASHGYM_SECRET_ENV_VARS": "HF_TOKEN,TORCH_HUB_TOKEN"}, home=str(tmp_path))
    assert child_environment(settings, DAEMON_ENV) == HANDED_ON


def test_the_operator_adds_names_but_never_a_secret(tmp_path: Path) -> None:
    settings = _settings(tmp_path, BASHGYM_TRAINER_ENV_VARS="WANDB_MODE,OPENAI_API_KEY,HF_TOKEN")
    child = child_environment(settings, DAEMON_ENV)
    assert child["WANDB_MODE"] == "offline"
    assert "OPENAI_API_KEY" not in child and "HF_TOKEN" not in child  # a provider's key, a named secret


def test_only_a_run_that_pushes_gets_the_hub_token_under_the_name_the_trainer_reads(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    assert HUB_TOKEN_ENV == hub.TOKEN_ENV
    pushing = child_environment(settings, DAEMON_ENV, hub_upload=True)
    assert pushing == {**child_environment(settings, DAEMON_ENV), "HF_TOKEN": DAEMON_ENV["HF_TOKEN"]}
    assert "HF_TOKEN" not in child_environment(settings, {**DAEMON_ENV, "HF_TOKEN": ""}, hub_upload=True)


def test_the_failpoint_setting_reaches_the_trainer_wherever_it_was_set(tmp_path: Path) -> None:
    (tmp_path / "bashgym.toml").write_text('failpoint = "trainer.checkpoint_written@2"\n')
    settings = load_settings({}, home=str(tmp_path))
    assert child_environment(settings, {})["BASHGYM_FAILPOINT"] == "trainer.checkpoint_written@2"
    assert "BASHGYM_FAILPOINT" not in child_environment(load_settings({}, home=str(tmp_path / "other")), {})
