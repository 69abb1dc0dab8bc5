"""Training that runs elsewhere: Hugging Face Jobs, managed providers, SkyPilot/dstack plans."""
