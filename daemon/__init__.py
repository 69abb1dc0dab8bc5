"""The BashGym daemon: API server, authority, supervisors, scheduler; plus its client and CLI."""
