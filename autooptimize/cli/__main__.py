"""``python -m autooptimize.cli``: the same as the ``autooptimize`` console script."""

from __future__ import annotations

import sys

from autooptimize.cli import main

sys.exit(main())
