"""Evidence: evaluations as child processes, RunCards and the promotion gate, model exchange and sources."""
