"""What the attacks share: one tiny model per module (built offline in a second, never trained here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bashgym.trainers.tiny import build_tiny


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")
