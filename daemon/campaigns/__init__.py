"""Campaigns: their lifecycle, the runner that advances them, the report scheduler, reports and the agent view."""
