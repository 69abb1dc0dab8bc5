"""The Discord adapter: slash commands over the daemon client, and channel posts of ledger events."""
