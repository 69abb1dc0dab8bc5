"""Training entrypoints; each runs as its own process and imports nothing from daemon or ledger."""
