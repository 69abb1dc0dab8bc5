"""The daemon's services, as every route handler reaches them (request.app.state.services)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from bashgym.daemon.authority import RateLimiter, WaitSlots
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.campaigns.scheduler import ReportScheduler
from bashgym.daemon.evidence.evaluations import EvaluationService
from bashgym.daemon.external.service import ExternalJobs
from bashgym.daemon.external.tracked import TrackedRuns
from bashgym.daemon.notices.sinks import SinkForwarder
from bashgym.daemon.settings import Settings
from bashgym.daemon.training import TrainingService
from bashgym.daemon.ui.sessions import SignIns
from bashgym.ledger.store import Ledger


@dataclass
class Services:
    """What handlers reach through request.app.state.services."""

    settings: Settings
    ledger: Ledger
    blobs: BlobStore
    version: str
    started_monotonic: float
    limiter: RateLimiter = field(default_factory=lambda: RateLimiter(600, 120))
    training: TrainingService | None = None
    evaluations: EvaluationService | None = None
    scheduler: ReportScheduler | None = None
    sinks: SinkForwarder | None = None
    external: ExternalJobs | None = None  # Hugging Face Jobs and managed providers (daemon/external/)
    tracked: TrackedRuns | None = None  # runs BashGym did not launch, reporting through bashgym.track
    # When a principal holding delegate.discord (the bot) last asked for notices: the bot is connected
    # while it keeps long-polling them.
    bot_polled_at: float | None = None
    discord_configured: bool = False  # a bot token is set in the daemon's environment
    nemo_key_set: bool = False  # the variable nemo_api_key_env names is set
    # The daemon's own environment: a tool it runs (nvidia-smi) gets settings.child_environment's share of it.
    environ: Mapping[str, str] = field(default_factory=dict)
    read_limiter: RateLimiter = field(default_factory=lambda: RateLimiter(6000, 600, what="reads"))
    # Keyed by client address: requests whose token is unknown, revoked, expired or malformed.
    bad_token_limiter: RateLimiter = field(default_factory=lambda: RateLimiter(60, 20, what="failed sign-ins"))
    waits: WaitSlots = field(default_factory=lambda: WaitSlots(8))
    sign_ins: SignIns = field(default_factory=SignIns)  # the web view's one-time codes (memory; sessions: ledger)

    @property
    def evaluator(self) -> EvaluationService:
        """The evaluation service; made on first use where the caller (a test harness) supplied none."""
        if self.evaluations is None:
            self.evaluations = EvaluationService(self.settings, self.ledger, self.blobs, environ=self.environ)
        return self.evaluations


def uptime_s(services: Services) -> float:
    return round(time.monotonic() - services.started_monotonic, 3)
