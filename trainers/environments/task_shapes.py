"""Which judged terminal task a training text asks: an instance of the evaluation suite, or a held-out family's.

Training data must hold neither. A run trained on the evaluation suite's instances is scored on what it trained on,
and one trained on a family the suite holds out reports memory as generalisation in its holdout figures. Rows are
recognised by their text, whatever file or dataset version they come in:

- an evaluation instance by its instruction together with its files (each file's name and the lines
  `task_prompt` shows of it);
- a held-out family by its instruction's skeleton: the text with every word the generator varies (file and
  directory names, setting keys, people, items, categories, numbers) replaced by a placeholder. The skeletons are
  collected from the generator itself over many seeds, so they follow its templates wherever they change; a task
  reworded by hand is not recognised (tests/unit/trainers/test_task_shapes.py measures recall on unseen seeds and
  false positives on the other families).

Standard library only beyond terminal_tasks: the daemon's dataset check imports this without torch.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from bashgym.trainers.environments.terminal_tasks import (
    CATEGORIES,
    FAMILIES,
    ITEMS,
    PEOPLE,
    SETTINGS,
    STEMS,
    WORDS,
    TerminalTask,
    default_suite,
    family_instructions,
    holdout_families,
)

PLACEHOLDER = "~"
# Seeds 0-15 at 12 instances each draw every template of every family (variants cycle by 4 at most, and each picks
# among 2 wordings); the unit test fails if a new template needs more.
SKELETON_SEEDS = range(16)
SKELETON_PER_SEED = 12
_VARYING = frozenset(word.lower() for words in (STEMS, WORDS, PEOPLE, ITEMS, CATEGORIES, SETTINGS) for word in words)
# A file or directory name: a word right before its extension or a slash ("notes.txt", "logs/").
_FILE_NAME = re.compile(r"[\w-]+(?=\.[a-z]|/)")
_TOKEN = re.compile(r"[a-z]+|[0-9]+")


@dataclass(frozen=True)
class JudgedTask:
    """What a text asks that training may not hold: an evaluation instance (`task_id` set) or a held-out family."""

    family: str
    task_id: str | None = None
    held_out: tuple[str, ...] = ()  # every family the suite holds out, for the message


def skeleton(text: str) -> str:
    """`text` lower-cased, whitespace collapsed, each word the generator varies replaced by PLACEHOLDER."""
    text = _FILE_NAME.sub(PLACEHOLDER, " ".join(text.lower().split()))
    return _TOKEN.sub(lambda m: PLACEHOLDER if m[0].isdigit() or m[0] in _VARYING else m[0], text)


@functools.cache
def family_skeletons(family: str) -> frozenset[str]:
    """The skeletons of every instruction `family`'s templates produce."""
    instructions = family_instructions(family, seeds=SKELETON_SEEDS, per_seed=SKELETON_PER_SEED)
    return frozenset(skeleton(instruction) for instruction in instructions)


def families_in(text: str, families: tuple[str, ...] = FAMILIES) -> list[str]:
    """The families of `families` whose instruction skeletons `text` holds."""
    plain = " ".join(text.lower().split())
    # Skeletons keep the text between placeholders as it was, so a text without a skeleton's longest literal
    # piece cannot hold it: most rows are decided by a few substring searches, without building their skeleton.
    if not any(anchor in plain for family in families for anchor in _anchors(family)):
        return []
    shape = skeleton(text)
    return [family for family in families if any(known in shape for known in family_skeletons(family))]


@functools.cache
def _anchors(family: str) -> frozenset[str]:
    return frozenset(max(known.split(PLACEHOLDER), key=len) for known in family_skeletons(family))


def judged_task_in(text: str) -> JudgedTask | None:
    """The evaluation instance `text` holds, else the held-out family it asks, else None."""
    task = evaluation_task_in(text)
    if task is not None:
        return JudgedTask(family=task.task_family, task_id=task.task_id)
    held_out = tuple(sorted(holdout_families()))
    found = families_in(text, held_out)
    return JudgedTask(family=found[0], held_out=held_out) if found else None


@functools.cache
def suite_id() -> str:
    """The id of the evaluation suite the rows are judged against."""
    return default_suite().suite_id


def evaluation_task_in(text: str) -> TerminalTask | None:
    """The task of the evaluation suite whose instruction and files (names, shown lines) `text` holds."""
    words = _words(text)
    for task, instruction, shown in _evaluation_tasks():
        if instruction in words and all(part in words for part in shown):
            return task
    return None


@functools.cache
def _evaluation_tasks() -> tuple[tuple[TerminalTask, str, tuple[str, ...]], ...]:
    return tuple(
        (task, _words(task.instruction), tuple(_words(part) for part in _file_parts(task)))
        for task in default_suite().tasks
    )


def _file_parts(task: TerminalTask) -> list[str]:
    """Each file's name and the lines `task_prompt` shows of it (a header alone is shared by many instances)."""
    parts = []
    for name, content in task.files.items():
        parts += [name, *(line for line in content.splitlines()[:5] if line.strip())]
    return parts


def _words(text: str) -> str:
    return " ".join(text.split())
