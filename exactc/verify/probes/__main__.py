"""python -m exactc.verify.probes: the probes' command (report.main)."""

import sys

from exactc.verify.probes.report import main

sys.exit(main())
