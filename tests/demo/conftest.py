"""The workload builder lives in data/ (run as `python data/build_local_workload.py`), so tests import it from there."""

import sys
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parents[2] / "data"
if str(DATA_DIR) not in sys.path:
    sys.path.insert(0, str(DATA_DIR))
