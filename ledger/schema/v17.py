"""Migration 0017: the web view's sessions, so a daemon restart signs no one out. Frozen once applied.

A row holds the sha256 of the session's cookie value (never the value), the token the sign-in link was asked with
(its id, never its secret: a revoked or expired token ends the session, read afresh on every page), for the bot's
links the Discord user, roles and guild it acted for, and when the session started, expires and ended (signed out,
revoked by its owner or an admin, or its token found dead).
"""

SQL = """
CREATE TABLE ui_sessions (
    session_id TEXT PRIMARY KEY,
    session_hash TEXT NOT NULL UNIQUE,
    workspace_id TEXT NOT NULL,
    actor_id TEXT NOT NULL,
    token_id TEXT NOT NULL REFERENCES api_tokens(token_id),
    delegation_json TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    ended_at TEXT,
    ended_by TEXT,
    end_reason TEXT CHECK (end_reason IN ('signed_out', 'revoked', 'token_dead'))
);
CREATE INDEX ui_sessions_by_actor ON ui_sessions (workspace_id, actor_id, created_at);
"""
