"""`python -m bashgym.bot`: run the Discord bot (what `bashgym bot` becomes by exec, and `bashgym up` starts)."""

import os
import sys

from bashgym.bot.app import main

sys.exit(main(os.environ))
