"""The web view: read-only pages of the ledger under /ui, served by the daemon with the API's authority."""
