"""`python -m easydata` runs the CLI."""

import sys

from easydata.cli import main

sys.exit(main())
