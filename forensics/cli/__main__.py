"""`python -m forensics.cli` runs the hsf command line."""

import sys

from forensics.cli import main

if __name__ == "__main__":
    sys.exit(main())
