"""Scheduler benchmark: all requests submitted at once (offline mode) and run to completion.

python -m roseinfer.benchmark_scheduler --num-requests 64 --max-batch-size 64 --max-new-tokens 128
"""

import sys

from roseinfer.bench import common


def main(argv: list[str] | None = None, freeze_heap: bool = False) -> int:
    """freeze_heap: the process is this benchmark's alone (`python -m`; `roseinfer.frozen_heap`)."""
    return common.main(
        "benchmark_scheduler", __doc__, default_mode="offline", argv=argv, freeze_heap=freeze_heap
    )


if __name__ == "__main__":
    sys.exit(main(freeze_heap=True))
