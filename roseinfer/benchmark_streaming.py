"""Streaming benchmark: requests arrive over time (online mode) and every emitted token is timestamped.

python -m roseinfer.benchmark_streaming --num-requests 16 --max-new-tokens 128 --compare-hf
"""

import sys

from roseinfer.bench import common


def main(argv: list[str] | None = None, freeze_heap: bool = False) -> int:
    """freeze_heap: the process is this benchmark's alone (`python -m`; `roseinfer.frozen_heap`)."""
    return common.main(
        "benchmark_streaming", __doc__, default_mode="online", argv=argv, freeze_heap=freeze_heap
    )


if __name__ == "__main__":
    sys.exit(main(freeze_heap=True))
