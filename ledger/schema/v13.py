"""Migration 0013: what a model version is, and what a project trains. Frozen once applied.

A model version's `kind` says what its files are: a causal LM (the policy every direct method trains), a reward
model (a scalar head over a causal LM, usable as GRPO's reward) or an embedding retriever. A project's `profile`
says which runs it takes: `default` trains policies and reward models, `embedding_retrieval` retrievers only.
Every row written before this migration is a causal LM in a default project, which is what it was.
"""

SQL = """
ALTER TABLE model_versions ADD COLUMN kind TEXT NOT NULL DEFAULT 'causal_lm'
    CHECK (kind IN ('causal_lm', 'reward_model', 'embedding_retriever'));
ALTER TABLE projects ADD COLUMN profile TEXT NOT NULL DEFAULT 'default'
    CHECK (profile IN ('default', 'embedding_retrieval'));
"""
