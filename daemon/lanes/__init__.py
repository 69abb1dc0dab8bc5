"""Where runs execute and who watches them: the local supervisor, the SSH and NeMo lanes, device groups, admission."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any


def on_first_use(name: str) -> Any:
    """The module `name`, executed when an attribute of it is first read (importlib's LazyLoader).

    The lanes' client libraries cost start-up time a daemon that never uses them should not pay: asyncssh
    ~0.35 s (its cryptography), httpx ~0.15 s (it loads rich for its own command line).
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.loader is not None, name
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
