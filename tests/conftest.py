import os

# keep numerical libraries single-threaded in tests: deterministic and fair on 2 cores
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import baselines
from securevfl.methods import load_all

# every registered method and baseline, as the CLI sees them
load_all()
baselines.load_all()
