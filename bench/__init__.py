"""The benchmark (`make bench`): see bench/cli.py and bench/README.md.

libgomp's threads spin-wait between parallel regions by default; on a shared or oversubscribed CPU
that spinning steals the cores the other threads need and a step gets 10x slower (measured on the
2-core development machine under load 8: 0.7 s -> 8 s per step). Every part of the benchmark (our
trainer, TRL's, the minimal work) therefore runs with OMP_WAIT_POLICY=PASSIVE unless the caller
set it; it has to be in the environment before torch loads libgomp, hence here.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
