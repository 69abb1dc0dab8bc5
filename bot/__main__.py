"""`python -m bashgym.bot`: run the Discord bot (what `bashgym bot` and `bashgym up` start)."""

import os
import sys

from bashgym.bot.app import main

sys.exit(main(os.environ))
