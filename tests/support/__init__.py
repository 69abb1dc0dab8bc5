"""What tests share (and bench/ imports): stand-ins of Discord, SSH, NeMo and the Hub, helpers, factories."""
