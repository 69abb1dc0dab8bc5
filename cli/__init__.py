"""`bashgym`: the terminal adapter (one module per command group, registered in registry.py) and the demo."""
