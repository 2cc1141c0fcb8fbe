"""Streaming benchmark: requests arrive over time (online mode) and every emitted token is timestamped.

python -m roseinfer.benchmark_streaming --num-requests 16 --max-new-tokens 128 --compare-hf
"""

import sys

from roseinfer.bench import common


def main(argv: list[str] | None = None) -> int:
    return common.main("benchmark_streaming", __doc__, default_mode="online", argv=argv)


if __name__ == "__main__":
    sys.exit(main())
