"""The environment a run trained in, as its own process measured it (bashgym.trainers.contracts.runtime), and what
the daemon makes of it: the run's environment digest, computed here from the facts, and the facts in which two
runs' environments differ.

The digest covers every fact but the host's name (which machine of a pool ran it says nothing of what ran):
Python and its implementation, the OS, the machine type, each recorded package's version, CUDA, the driver, the
accelerators' names, and the git commit of the user's code with its dirty flag. The shape is strict, every string
bounded: whoever sends it may be hostile.
"""

from __future__ import annotations

from typing import Annotated, Any

from bashgym.client.specs import Spec
from bashgym.client.validation import canonical_json, sha256_text
from pydantic import Field

Fact = Annotated[str, Field(max_length=200, pattern=r"^[^\x00-\x1f\x7f]*$")]  # one line, printable
PackageName = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")]
MAX_PACKAGES, MAX_ACCELERATORS = 64, 64
VOLATILE = frozenset({"hostname"})  # shown, not in the digest


class GitState(Spec):
    commit: Annotated[str, Field(pattern=r"^([0-9a-f]{40}|[0-9a-f]{64})$")]
    dirty: bool


class RunEnvironment(Spec):
    """The facts of one run's environment; the digest is the daemon's to compute, never a field."""

    python: Fact
    implementation: Fact = ""
    os: Fact = ""
    machine: Fact = ""
    packages: Annotated[dict[PackageName, Fact], Field(max_length=MAX_PACKAGES)] = Field(default_factory=dict)
    cuda: Fact | None = None
    driver: Fact | None = None
    accelerators: Annotated[list[Fact], Field(max_length=MAX_ACCELERATORS)] = Field(default_factory=list)
    git: GitState | None = None
    hostname: Fact = ""


def environment_digest(environment: RunEnvironment) -> str:
    """sha256 of the canonical JSON of every fact but the volatile ones."""
    return sha256_text(canonical_json(environment.model_dump(mode="json", exclude=set(VOLATILE))))


def _summary_facts(facts: dict[str, Any]) -> dict[str, str]:
    """Each comparable fact as one `name -> value` pair: packages by their names, the commit with its dirty flag."""
    git = facts.get("git") or None
    flat = {
        "python": f"{facts.get('python') or '-'} ({facts.get('implementation') or '-'})",
        "os": str(facts.get("os") or "-"),
        "machine": str(facts.get("machine") or "-"),
        "CUDA": str(facts.get("cuda") or "none"),
        "driver": str(facts.get("driver") or "none"),
        "accelerators": ", ".join(facts.get("accelerators") or []) or "none",
        "git commit": f"{git['commit'][:12]}{' (dirty)' if git['dirty'] else ''}" if git else "none",
    }
    packages = facts.get("packages") or {}
    return {**{name: str(version) for name, version in sorted(packages.items())}, **flat}


def environment_differences(first: dict[str, Any] | None, second: dict[str, Any] | None) -> list[str]:
    """Each fact in which two recorded environments differ, as `torch 2.13.0 vs 2.12.1` (first's value first); an
    environment not recorded is one difference."""
    if first is None or second is None:
        if first is second:
            return []
        return ["environment not recorded" + (" for the first" if first is None else " for the second")]
    a, b = _summary_facts(first), _summary_facts(second)
    return [
        f"{name} {a.get(name, 'absent')} vs {b.get(name, 'absent')}"
        for name in dict.fromkeys([*a, *b])
        if a.get(name) != b.get(name)
    ]


def environment_line(facts: dict[str, Any]) -> str:
    """One line of the facts a reader looks for first: Python, torch, transformers, TRL, PEFT, CUDA, GPUs, commit."""
    packages = facts.get("packages") or {}
    parts = [f"python {facts.get('python')}"]
    parts += [
        f"{name} {packages[name]}"
        for name in ("torch", "transformers", "trl", "peft", "accelerate")
        if name in packages
    ]
    parts.append(f"CUDA {facts['cuda']}" if facts.get("cuda") else "no CUDA")
    accelerators = facts.get("accelerators") or []
    if accelerators:
        parts.append(f"{len(accelerators)}x {accelerators[0]} (driver {facts.get('driver') or '-'})")
    git = facts.get("git")
    if git:
        parts.append(f"git {git['commit'][:12]}{' dirty' if git['dirty'] else ''}")
    return ", ".join(parts)
