"""`python -m exactc COMMAND ...` is `exactc COMMAND ...` (exactc/cli.py)."""

import sys

from exactc.cli import main

sys.exit(main())
