"""Print (and with --write store) the leave-out validation of the GPU forecasts on the shared
tables: leave one batch size out, leave one model family out, and the SSD H100 transfer check
(validation/hardware/leaveout.py; docs/validation.md, "GPU forecasts before the run").

    .venv/bin/python data/gpu-tables/leaveout.py [--rows] [--write]
"""

from __future__ import annotations

import sys

from validation.hardware.leaveout import main

if __name__ == "__main__":
    sys.exit(main())
