import os

# Child processes inherit this: two cores, so one thread each keeps multi-process tests fast.
os.environ.setdefault("OMP_NUM_THREADS", "1")
