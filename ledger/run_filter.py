"""The runs search grammar (MLflow's, `and` only) and the runs table's columns, compiled to parameterised SQL.

    filter  := clause ('and' clause)*
    clause  := column op value | column ['not'] 'in' '(' value (',' value)* ')'
    op      := = | != | > | >= | < | <= | like | ilike           (like is case-sensitive, ilike is not)
    column  := metrics.KEY[:latest|best|final|min|max] | params.KEY | tags.KEY | eval.KEY[:value|ci_low|ci_high]
               | [attributes.]NAME                                   (NAME: see ATTRIBUTES)
    value   := 'text' | "text" | number (1e-4, -3, 0.5)

A KEY runs to the next space or operator (`metrics.train.loss` is the metric `train.loss`); one with other characters
is backquoted (`params.`my key``). Where each column's value comes from:

  - metrics.KEY: the run's series of that name over every attempt; `latest` (the default, as MLflow's) is the value at
    the highest step (the latest attempt wins a step several logged), `final` the same once the run has ended and
    nothing before, `best` the lowest for a name that reads as a loss or error and the highest otherwise.
  - params.KEY: what the run's own process logged last (`run.tracked` and `run.imported` events), else the params
    it was opened with (`config.params`), else its launch config's key (a launched run's spec: `learning_rate`).
    Text that reads as a JSON number compares as a number when the value given is one.
  - tags.KEY: the run's tags as ledger/tags.py keeps them (entity_tags: set by `run tag`, a tracked run's
    set_tags, an MLflow import), one model for every run.
  - eval.KEY: the run's latest completed evaluation's metric (`eval.pass@1`); `ci_low` and `ci_high` bound its 95%
    Wilson interval over the evaluation's sample count.

Nothing a filter holds reaches the SQL text: keys and values become bound parameters, and the only text compiled in
comes from this module's own tables. A filter that does not parse raises InvalidInput naming the position and what
was expected there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from bashgym.client.errors import InvalidInput
from bashgym.client.states import TERMINAL

STATUSES = ("queued", "preparing", "running", "paused", "unknown", "completed", "failed", "cancelled")
TIMES = ("created_at", "updated_at", "started_at", "ended_at")
_LANE = "json_extract(r.config_json, '$.compute_target')"
# Attribute -> its SQL over `runs AS r` (fixed text, never from a request).
ATTRIBUTES = {
    "run_id": "r.run_id", "experiment_id": "r.experiment_id", "method": "r.method", "status": "r.status",
    "context_status": "r.context_status", "model_version_id": "r.model_version_id",
    "dataset_version_id": "r.dataset_version_id", "launched_by": "r.launched_by", "source_system": "r.source_system",
    "created_at": "r.created_at", "updated_at": "r.updated_at", "started_at": "r.started_at", "ended_at": "r.ended_at",
    "compute_target": _LANE,
    "lane": f"CASE WHEN instr({_LANE}, ':') THEN substr({_LANE}, 1, instr({_LANE}, ':') - 1) ELSE {_LANE} END",
    "duration_s": "CASE WHEN r.started_at IS NULL THEN NULL ELSE round((julianday(COALESCE(r.ended_at, "
    "strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))) - julianday(r.started_at)) * 86400.0, 1) END",
}  # fmt: skip
NUMERIC_ATTRIBUTES = frozenset({"duration_s"})
ALIASES = {"attributes", "attribute", "attr", "run"}
ENTITIES = ("metrics", "params", "tags", "eval")
METRIC_VIEWS = ("latest", "best", "final", "min", "max")
EVAL_VIEWS = ("value", "ci_low", "ci_high")
LOWER_IS_BETTER = ("loss", "error", "perplexity", "ppl", "regret", "kl", "wer", "cer")
MAX_CLAUSES = 20
MAX_COLUMNS = 20
WILSON_Z = 1.96
_TOKEN = re.compile(
    r"""\s*(?:(?P<string>'(?:[^']|'')*'|"(?:[^"]|"")*")|(?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.@]))
    |(?P<op>!=|>=|<=|=|>|<|\(|\)|,)|(?P<name>(?:`[^`]*`|[A-Za-z_][\w@/\-]*)(?:\.(?:`[^`]*`|[\w@/\-]+))*(?::\w+)?)
    |(?P<bad>\S))""",
    re.VERBOSE,
)
_SEGMENT = re.compile(r"`([^`]*)`|([^.`:]+)")


@dataclass(frozen=True)
class Column:
    """One column of the runs table: what it reads (`kind`: attribute, metric, param, tag, eval), of which key, seen
    how (`view`: a metric's latest/best/final/min/max, an evaluation's value/ci_low/ci_high)."""

    kind: str
    key: str
    view: str = ""

    @property
    def name(self) -> str:
        if self.kind == "attribute":
            return self.key
        key = self.key if re.fullmatch(r"[\w@/\-][\w.@/\-]*", self.key) else f"`{self.key}`"
        prefix = {"metric": "metrics", "param": "params", "tag": "tags", "eval": "eval"}[self.kind]
        default = {"metric": "latest", "eval": "value"}.get(self.kind, "")
        return f"{prefix}.{key}" + (f":{self.view}" if self.view and self.view != default else "")

    @property
    def is_numeric(self) -> bool:
        return self.kind in ("metric", "eval") or (self.key in NUMERIC_ATTRIBUTES and self.kind == "attribute")

    def sql(self) -> tuple[str, list[object]]:
        """The column's value for the run `r`, and its bound arguments."""
        if self.kind == "attribute":
            return ATTRIBUTES[self.key], []
        if self.kind == "metric":
            return _metric_sql(self.key, self.view)
        if self.kind == "eval":
            return _eval_sql(self.key, self.view)
        if self.kind == "tag":  # every run's tags live in entity_tags (ledger/tags.py), whoever set them
            return (
                "(SELECT t.value FROM entity_tags AS t WHERE t.workspace_id = r.workspace_id AND t.project_id = "
                "r.project_id AND t.entity_kind = 'run' AND t.entity_id = r.run_id AND t.key = ?)",
                [self.key],
            )
        logged = (
            "(SELECT json_extract(ev.payload_json, ?) FROM events AS ev WHERE ev.workspace_id = r.workspace_id "
            "AND ev.project_id = r.project_id AND ev.run_id = r.run_id AND ev.event_type IN ('run.tracked', "
            "'run.imported') AND json_extract(ev.payload_json, ?) IS NOT NULL ORDER BY ev.cursor DESC LIMIT 1)"
        )
        path = f'$.params."{self.key}"'
        return f"COALESCE({logged}, json_extract(r.config_json, ?), json_extract(r.config_json, ?))", [
            path, path, path, f'$."{self.key}"'
        ]  # fmt: skip


@dataclass(frozen=True)
class Clause:
    column: Column
    op: str
    values: tuple[str | float, ...]


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    at: int  # 1-based character position in the filter


def parse_filter(text: str) -> list[Clause]:
    """The filter's clauses (all must hold); InvalidInput naming the position and what was expected."""
    tokens = _tokens(text)
    clauses: list[Clause] = []
    at = 0
    while at < len(tokens):
        if clauses:
            if not _is_word(tokens[at], "and"):
                _fail(text, tokens[at], "`and` between two conditions (the grammar has no `or`)")
            at += 1
        clause, at = _clause(text, tokens, at)
        clauses.append(clause)
        if len(clauses) > MAX_CLAUSES:
            raise InvalidInput(f"The filter holds more than {MAX_CLAUSES} conditions.", hint="Narrow it in steps.")
    return clauses


def parse_columns(text: str) -> list[Column]:
    """A comma-separated list of columns (`metrics.train.loss:best, params.lr, duration_s`)."""
    tokens = _tokens(text)
    columns: list[Column] = []
    at = 0
    while at < len(tokens):
        if columns:
            if tokens[at].text != ",":
                _fail(text, tokens[at], "`,` between two columns")
            at += 1
            if at == len(tokens):
                _fail(text, None, "a column after `,`")
        columns.append(_column(text, tokens[at]))
        at += 1
    if len(columns) > MAX_COLUMNS:
        raise InvalidInput(f"{len(columns)} columns were asked for; at most {MAX_COLUMNS} are shown.")
    return list(dict.fromkeys(columns))


def parse_sort(text: str) -> tuple[Column, bool]:
    """`COLUMN [asc|desc]` (desc by default): the column and whether it is descending."""
    tokens = _tokens(text)
    if not tokens:
        _fail(text, None, "a column to sort by")
    column = _column(text, tokens[0])
    if len(tokens) == 1:
        return column, True
    if len(tokens) > 2 or tokens[1].text.lower() not in ("asc", "desc"):
        _fail(text, tokens[1], "`asc` or `desc` after the column")
    return column, tokens[1].text.lower() == "desc"


def compile_filter(clauses: list[Clause]) -> tuple[list[str], list[object]]:
    """SQL conditions over `runs AS r` (to be joined by AND) and their bound arguments, in order."""
    where: list[str] = []
    args: list[object] = []
    for clause in clauses:
        expr, bound = clause.column.sql()
        numeric = isinstance(clause.values[0], float)
        if numeric and not clause.column.is_numeric:
            expr = f"(CASE WHEN json_valid({expr}) AND json_type({expr}) IN ('integer', 'real') THEN CAST({expr} AS REAL) END)"  # noqa: E501
            bound = bound * 3
        if clause.op in ("in", "not in"):
            marks = ", ".join("?" * len(clause.values))
            where.append(f"{expr} {clause.op.upper()} ({marks})")
            args.extend([*bound, *clause.values])
        elif clause.op == "like":
            where.append(f"{expr} GLOB ?")
            args.extend([*bound, _glob(str(clause.values[0]))])
        elif clause.op == "ilike":
            where.append(f"lower({expr}) LIKE lower(?) ESCAPE '\\'")
            args.extend([*bound, str(clause.values[0])])
        else:
            where.append(f"{expr} {clause.op} ?")
            args.extend([*bound, clause.values[0]])
    return where, args


def _clause(text: str, tokens: list[Token], at: int) -> tuple[Clause, int]:
    column = _column(text, tokens[at])
    at += 1
    if at >= len(tokens):
        _fail(text, None, f"a comparison after {column.name} (= != > >= < <= like ilike in)")
    op = tokens[at].text.lower()
    if op == "not" and at + 1 < len(tokens) and _is_word(tokens[at + 1], "in"):
        op, at = "not in", at + 1
    if op in ("in", "not in"):
        values, at = _listed(text, tokens, at + 1)
    elif op in ("=", "!=", ">", ">=", "<", "<=", "like", "ilike"):
        at += 1
        if at >= len(tokens):
            _fail(text, None, f"a value after {column.name} {op}")
        values, at = (_value(text, tokens[at]),), at + 1
    else:
        _fail(text, tokens[at], f"a comparison after {column.name} (= != > >= < <= like ilike in)")
    kinds = {isinstance(v, float) for v in values}
    if len(kinds) > 1:
        _fail(text, tokens[at - 1], "values of one kind in the list (all numbers or all quoted text)")
    _check_values(text, tokens[at - 1], column, op, values)
    return Clause(column, op, values), at


def _listed(text: str, tokens: list[Token], at: int) -> tuple[tuple[str | float, ...], int]:
    if at >= len(tokens) or tokens[at].text != "(":
        _fail(text, tokens[at] if at < len(tokens) else None, "`(` opening the list after `in`")
    values: list[str | float] = []
    at += 1
    while True:
        if at >= len(tokens):
            _fail(text, None, "a value and `)` closing the list")
        values.append(_value(text, tokens[at]))
        at += 1
        if at < len(tokens) and tokens[at].text == ",":
            at += 1
            continue
        if at < len(tokens) and tokens[at].text == ")":
            return tuple(values), at + 1
        _fail(text, tokens[at] if at < len(tokens) else None, "`,` or `)` in the list")


def _check_values(text: str, token: Token, column: Column, op: str, values: tuple[str | float, ...]) -> None:
    numeric = isinstance(values[0], float)
    if column.is_numeric and not numeric:
        _fail(text, token, f"a number for {column.name} (it holds numbers), not quoted text")
    if op in ("like", "ilike") and numeric:
        _fail(text, token, f"quoted text after {op}")
    if column.kind != "attribute" or numeric:
        return
    if column.key == "status":
        for value in values:
            if value not in STATUSES and op not in ("like", "ilike"):
                _fail(text, token, f"a run status ({', '.join(STATUSES)}), not {value!r}")
    if column.key in TIMES and op not in ("like", "ilike"):
        for value in values:
            try:
                datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            except ValueError:
                _fail(
                    text, token, f"an ISO time for {column.key} ('2026-12-01' or '2026-12-01T09:30:00Z'), not {value!r}"
                )


def _column(text: str, token: Token) -> Column:
    if token.kind != "name":
        _fail(text, token, "a column (metrics.KEY, params.KEY, tags.KEY, eval.KEY or an attribute such as status)")
    raw, view = token.text, ""
    if re.search(r":\w+$", raw) and not raw.endswith("`"):
        raw, _, view = raw.rpartition(":")
    segments = [m.group(2) if m.group(1) is None else m.group(1) for m in _SEGMENT.finditer(raw)]
    head = segments[0].lower() if segments else ""
    if head in ALIASES or (len(segments) == 1 and head not in ENTITIES):
        key = segments[-1] if head in ALIASES else segments[0]
        if len(segments) > (2 if head in ALIASES else 1) or key not in ATTRIBUTES or view:
            _fail(text, token, f"a run attribute ({', '.join(ATTRIBUTES)})")
        return Column("attribute", key)
    if head not in ENTITIES:
        _fail(text, token, "metrics., params., tags., eval. or attributes. before the key")
    key = ".".join(segments[1:])
    if not key:
        _fail(text, token, f"a key after {head}.")
    if '"' in key or len(key) > 250:
        _fail(text, token, 'a key without `"` and under 250 characters')
    kind = {"metrics": "metric", "params": "param", "tags": "tag", "eval": "eval"}[head]
    views = {"metric": METRIC_VIEWS, "eval": EVAL_VIEWS}.get(kind, ())
    if view and view not in views:
        _fail(text, token, f"one of {', '.join(views)} after `:`" if views else f"no `:` view on {head}")
    return Column(kind, key, view or {"metric": "latest", "eval": "value"}.get(kind, ""))


def _value(text: str, token: Token) -> str | float:
    if token.kind == "string":
        quote = token.text[0]
        return token.text[1:-1].replace(quote * 2, quote)
    if token.kind == "number":
        return float(token.text)
    return _fail(text, token, "a value: 'quoted text' or a number")


def _tokens(text: str) -> list[Token]:
    if len(text) > 2000:
        raise InvalidInput(f"The filter is {len(text)} characters long; the most is 2,000.")
    tokens: list[Token] = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup or "bad"
        at = match.start(kind) + 1
        if kind == "bad":
            opening = match.group(kind)
            what = "a closing quote" if opening in "'\"`" else "a column, a comparison or a value"
            _fail(text, Token("bad", opening, at), what)
        tokens.append(Token(kind, match.group(kind), at))
    return tokens


def _is_word(token: Token, word: str) -> bool:
    return token.kind == "name" and token.text.lower() == word


def _fail(text: str, token: Token | None, expected: str) -> str:
    where = f"at character {token.at} ({token.text!r})" if token else "at its end"
    raise InvalidInput(
        f"The filter {text!r} does not parse {where}: expected {expected}.",
        hint="Write conditions as `metrics.pass@1 > 0.5 and params.learning_rate < 1e-4 and tags.team = 'x'`; "
        "backquote a key with other characters: params.`my key`.",
        details={"position": token.at if token else len(text) + 1, "expected": expected},
    )


def _glob(pattern: str) -> str:
    """A LIKE pattern as GLOB (case-sensitive, as MLflow's like): % and _ become * and ?; GLOB's own marks are
    bracketed to stand for themselves."""
    swaps = {"%": "*", "_": "?", "*": "[*]", "?": "[?]", "[": "[[]"}
    return "".join(swaps.get(ch, ch) for ch in pattern)


def _metric_sql(key: str, view: str) -> tuple[str, list[object]]:
    scope = (
        "FROM metric_series AS s JOIN metric_points AS p ON p.series_id = s.series_id WHERE s.workspace_id = "
        "r.workspace_id AND s.project_id = r.project_id AND s.run_id = r.run_id AND s.metric = ?"
    )
    latest = f"(SELECT p.value {scope} ORDER BY p.step DESC, s.attempt_id DESC LIMIT 1)"
    if view == "latest":
        return latest, [key]
    if view == "final":
        ended = ", ".join(f"'{s}'" for s in sorted(TERMINAL))
        return f"(CASE WHEN r.status IN ({ended}) THEN {latest} END)", [key]
    lowest = view == "min" or (view == "best" and any(mark in key.lower() for mark in LOWER_IS_BETTER))
    return f"(SELECT {'MIN' if lowest else 'MAX'}(p.value) {scope})", [key]


def _eval_sql(key: str, view: str) -> tuple[str, list[object]]:
    value = "json_extract(e.metrics_json, ?)"
    if view == "value":
        shown = value
        args: list[object] = [f'$."{key}"']
    else:
        # Wilson's 95% interval of a proportion over n samples: centre ± half, both over (1 + z²/n).
        z2 = WILSON_Z**2
        sign = "-" if view == "ci_low" else "+"
        shown = (
            f"CASE WHEN e.sample_count > 0 THEN (({value} + {z2} / (2.0 * e.sample_count)) {sign} {WILSON_Z} * "
            f"sqrt(max(0.0, {value} * (1 - {value})) / e.sample_count + {z2} / (4.0 * e.sample_count * "
            f"e.sample_count))) / (1 + {z2} / e.sample_count) END"
        )
        args = [f'$."{key}"'] * 4
    return (
        f"(SELECT {shown} FROM eval_results AS e WHERE e.workspace_id = r.workspace_id AND e.project_id = "
        "r.project_id AND e.run_id = r.run_id AND e.status = 'completed' ORDER BY e.created_at DESC LIMIT 1)",
        args,
    )
