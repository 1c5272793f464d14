"""Test-wide settings: one BLAS/torch thread (over-subscription on 2 cores costs 30-45x)."""

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")
