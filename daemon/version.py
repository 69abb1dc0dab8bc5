"""The installed bashgym version, read once from package metadata."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version


@cache
def bashgym_version() -> str:
    try:
        return version("bashgym")
    except PackageNotFoundError:
        return "0.0.0+unknown"
