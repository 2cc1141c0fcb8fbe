"""`python -m roseinfer.serve MODEL [...]`."""

import sys

from roseinfer.serve.cli import main

if __name__ == "__main__":
    sys.exit(main())
