"""Ledger events for people: notices rendered for Discord and the console, and sinks that forward events."""
