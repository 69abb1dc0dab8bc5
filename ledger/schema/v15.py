"""Migration 0015: when each metric point was logged. Frozen once applied.

A point keeps the wall-clock time the trainer logged it at (Unix seconds), so a curve can be drawn against time as
well as against steps. Points recorded before this migration, and points a client sent without a time, keep NULL:
their time was never measured, so none is made up.
"""

SQL = """
ALTER TABLE metric_points ADD COLUMN logged_at REAL;
"""
