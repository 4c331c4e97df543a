"""``python3 -m crown``: the command line (crown/cli.py)."""
import sys

from .cli import main

sys.exit(main())
