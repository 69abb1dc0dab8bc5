"""What the daemon and a trainer agree on, importable without torch: the training request, dataset contracts,
what each field does, the run directory, the evaluation request, placement, topology and evidence math."""
