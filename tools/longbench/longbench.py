#!/usr/bin/env python3
"""LongBench through slake: predictions with the official protocol, the official scores, and the
table of datasets x (policy, budget). See README.md beside this file."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lbeval.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
