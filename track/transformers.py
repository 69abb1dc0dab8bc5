"""Track any `transformers.Trainer` (and so every TRL trainer) as a run of a project: one callback.

    trainer = SFTTrainer(..., callbacks=[BashGymCallback(project="P", model_version="MV", dataset_version="DV")])

The one module of bashgym.track that imports transformers (and so torch): `import bashgym.track` stays light.
On train begin the callback opens the run with the TrainingArguments and the model's config as params; every
value the Trainer logs becomes a metric at its global step; every checkpoint and the final model are uploaded as
artifacts; the run ends `completed` when training ends. Under accelerate or torchrun only the main process
(rank 0) logs, and the world size is a param.

Trainer has no hook for an exception, so a training that raises is ended `failed` with the exception's summary
by the process's exception hook (an uncaught exception), else at the latest when the process exits (the run's
own exit handler), or when the same callback's next training begins. SIGTERM, which runs no exit handler (torchrun
stops the other ranks so when one fails), ends it `failed` before the signal ends the process.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from bashgym.track import start_run
from bashgym.track.run import Run
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

__all__ = ["BashGymCallback"]

log = logging.getLogger("bashgym.track")
MAX_PARAM_CHARS = 2000  # the daemon's longest param value (client/tracking.py ParamValue)
# Arguments that may hold a secret: transformers masks `*_token` in to_dict, and we drop them (and their kin)
# rather than store a mask as if it were a setting.
SECRET = re.compile(r"(_token|secret|password|api_key|credentials?)$", re.I)
# The method a TRL config's class names; a plain TrainingArguments trains what the script says (`custom`).
METHODS = {
    "SFTConfig": "sft",
    "DPOConfig": "dpo",
    "GRPOConfig": "grpo",
    "KTOConfig": "kto",
    "ORPOConfig": "orpo",
    "CPOConfig": "cpo",
    "PPOConfig": "ppo",
    "RLOOConfig": "rloo",
    "RewardConfig": "reward_model",
}
NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_.:/-]")  # client/validation.py METRIC_NAME_RE's alphabet
ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]


class BashGymCallback(TrainerCallback):
    """Record a Trainer's training as a run of `project` trained from `model_version` on `dataset_version`.

    Any other keyword is passed to bashgym.track.start_run (`api=`, `token=`, `params=`, `tags=`, `method=`...).
    `run` is the open run while training (None on other ranks), for the script's own logs; `run_id` stays."""

    def __init__(
        self,
        *,
        project: str,
        model_version: str,
        dataset_version: str,
        experiment: str | None = None,
        **start_run_kwargs: Any,
    ) -> None:
        self.start_run_kwargs = {
            "project": project,
            "model_version": model_version,
            "dataset_version": dataset_version,
            "experiment": experiment,
            **start_run_kwargs,
        }
        self.run: Run | None = None
        self.run_id: str | None = None  # the latest run's, after it ended too
        self._previous_hook: ExceptHook | None = None
        self._on_sigterm: Callable[[int, FrameType | None], None] | None = None

    # -- the Trainer's events --------------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if not state.is_world_process_zero:
            return
        if self.run is not None:  # a training of this callback that raised, caught by the script
            self._end("failed", "training began again before this run reached its end")
        kwargs_given = dict(self.start_run_kwargs)
        params = {**training_params(args, kwargs.get("model")), **dict(kwargs_given.pop("params", None) or {})}
        kwargs_given.setdefault("method", METHODS.get(type(args).__name__, "custom"))
        self.run = start_run(**kwargs_given, params=params)
        self.run_id = self.run.run_id
        self._watch_exceptions()

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if self.run is None or not state.is_world_process_zero or not logs:
            return
        values = {metric_name(name): float(v) for name, v in logs.items() if is_number(v)}
        if values:
            self.run.log_metrics(values, step=state.global_step)

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        # Every rank writes its share of a checkpoint (its rng_state_N.pth; its optimizer shard under FSDP or
        # DeepSpeed), and nothing in the Trainer waits for the others after its last collective: rank 0 would
        # upload a checkpoint without a slower rank's files, or with one half written. Every rank calls on_save,
        # so every rank waits here (a no-op in one process) before rank 0 reads the directory.
        if args.distributed_state is not None:
            args.distributed_state.wait_for_everyone()
        if self.run is None or not state.is_world_process_zero:
            return
        name = f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        checkpoint = Path(str(args.output_dir)) / name
        if checkpoint.is_dir():  # not under a hyperparameter search's per-trial folder: nothing to upload here
            self.run.log_artifact(checkpoint, name=name)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.run is None or not state.is_world_process_zero:
            return
        try:
            self._log_final_model(kwargs.get("model"), kwargs.get("processing_class"))
        except BaseException as exc:
            self._end("failed", f"the final model could not be recorded: {type(exc).__name__}: {exc}")
            raise
        self._end("completed")

    # -- the run's end -----------------------------------------------------------------------------

    def _log_final_model(self, model: Any, processing_class: Any) -> None:
        """The model as training left it (the best one, with load_best_model_at_end), saved once as the Trainer
        would (an adapter for a PEFT model) to a temporary directory, uploaded as artifact `model`: at this event
        the script has not saved it yet, and a checkpoint holds optimizer state besides."""
        assert self.run is not None
        if model is None:
            log.warning("Run %s: the Trainer passed no model at train end; no `model` artifact.", self.run.run_id)
            return
        with tempfile.TemporaryDirectory(prefix="bashgym-model-") as saved:
            model.save_pretrained(saved)
            if hasattr(processing_class, "save_pretrained"):
                processing_class.save_pretrained(saved)
            self.run.log_artifact(Path(saved), name="model")

    def _end(self, status: str, error_summary: str = "") -> None:
        run, self.run = self.run, None
        self._restore_hook()
        if run is not None:
            run.end(status, error_summary)

    def _watch_exceptions(self) -> None:
        """An uncaught exception (training raised) ends the run `failed` with its summary before Python reports it;
        a caught one leaves the run to the next training's begin or the process's exit."""
        self._previous_hook = previous = sys.excepthook

        def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
            try:
                self._end("failed", f"{kind.__name__}: {exc}")
            finally:
                previous(kind, exc, tb)

        sys.excepthook = hook
        self._watch_sigterm()

    def _watch_sigterm(self) -> None:
        """SIGTERM ends the run `failed`, then kills the process as it would have. torchrun stops every rank so
        when one fails, and a scheduler stops a job so; the signal's default action runs no exit handler, and
        rank 0, busy outside a collective (an upload, an evaluation), would leave its run open to turn `unknown`.
        Only where the script left SIGTERM's default: a handler of its own may mean to go on."""
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers are set from the main thread only
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            self._end("failed", "SIGTERM: the process was stopped (torchrun stops every rank when one fails)")
            os.kill(os.getpid(), signal.SIGTERM)  # _end put the default back: the process ends by the signal

        self._on_sigterm = on_sigterm
        signal.signal(signal.SIGTERM, on_sigterm)

    def _restore_hook(self) -> None:
        if self._previous_hook is not None:
            sys.excepthook = self._previous_hook
            self._previous_hook = None
        handler, self._on_sigterm = self._on_sigterm, None
        if handler is not None and signal.getsignal(signal.SIGTERM) is handler:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def training_params(args: TrainingArguments, model: Any) -> dict[str, Any]:
    """The run's params: every TrainingArguments field but secrets (`args.NAME`), the model's config
    (`model.NAME`), a PEFT adapter's config (`peft.ADAPTER.NAME`) and the world size, each a JSON scalar."""
    params: dict[str, Any] = {"world_size": int(args.world_size), "args_class": type(args).__name__}
    given: dict[str, Any] = args.to_dict()  # type: ignore[no-untyped-call]
    arguments = {name: value for name, value in given.items() if not SECRET.search(name)}
    params.update(flat("args", arguments))
    config: Any = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict"):
        params.update(flat("model", config.to_dict()))
    for adapter, peft in (getattr(model, "peft_config", None) or {}).items():
        params.update(flat(f"peft.{adapter}", peft.to_dict() if hasattr(peft, "to_dict") else vars(peft)))
    return params


def flat(prefix: str, values: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Nested mappings as dotted names; lists and other values as JSON text (cut to the daemon's limit)."""
    for name, value in values.items():
        key = f"{prefix}.{name}"
        if isinstance(value, Mapping):
            yield from flat(key, value)
        elif value is None or isinstance(value, bool | int | str) or is_number(value):
            yield key, value if not isinstance(value, str) else value[:MAX_PARAM_CHARS]
        else:
            yield key, json.dumps(value, default=str, sort_keys=True)[:MAX_PARAM_CHARS]


def metric_name(name: str) -> str:
    """A logged key as a metric name the daemon takes (letters, digits and `_.:/-`, starting with a letter or
    digit): a custom key with a space is kept, not refused with the whole batch."""
    cleaned = NOT_IN_NAME.sub("_", name).lstrip("_.:/-")[:200]
    return cleaned or "value"


def is_number(value: Any) -> bool:
    """A finite int or float (a bool is no metric)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
