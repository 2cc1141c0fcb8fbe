"""`python -m roseinfer serve MODEL [...]`: the `roseinfer` command's entry point."""

import sys

from roseinfer.serve.cli import roseinfer_main

if __name__ == "__main__":
    sys.exit(roseinfer_main())
