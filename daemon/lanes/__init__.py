"""Where runs execute and who watches them: the local supervisor, the SSH and NeMo lanes, device groups, admission."""
