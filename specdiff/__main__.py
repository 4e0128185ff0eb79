"""`python -m specdiff`: the `specdiff` command."""
import sys

from specdiff.cli import main

if __name__ == "__main__":
    sys.exit(main())
