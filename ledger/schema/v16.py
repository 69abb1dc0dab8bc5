"""Migration 0016: where each evaluation result and comparison came from. Frozen once applied.

`measured`: recorded by the daemon itself, a result of its own evaluator (with the attempts' digest and the
evaluated model files' digests in its details) or a comparison it computed of two measured results. `asserted`:
a caller's import (`POST .../eval-results`, `POST .../comparisons`, which need `evidence.import`), or a comparison
the daemon computed of a result that is not measured. Only the ledger's writers set it, as the daemon's code tells
them; no wire spec carries it. Rows made before this migration keep `unrecorded`: nothing shows which they were, so
none is taken for measured (the gate asks for them to be evaluated again).
"""

SQL = """
ALTER TABLE eval_results ADD COLUMN provenance TEXT NOT NULL DEFAULT 'unrecorded'
    CHECK (provenance IN ('measured', 'asserted', 'unrecorded'));
ALTER TABLE comparisons ADD COLUMN provenance TEXT NOT NULL DEFAULT 'unrecorded'
    CHECK (provenance IN ('measured', 'asserted', 'unrecorded'));
"""
