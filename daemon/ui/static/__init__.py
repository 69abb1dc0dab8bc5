"""The web view's static assets (package data)."""
