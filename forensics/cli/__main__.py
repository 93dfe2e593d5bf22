"""`python -m forensics.cli` runs the hsf command line."""

import sys

from forensics.cli import main

sys.exit(main())
