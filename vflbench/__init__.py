"""vflbench: reproducible benchmarks for vertical federated learning with missing feature blocks."""

import os

__version__ = "0.1.0"

# Large CPU tensors on transparent huge pages (torch's own allocator switch, read at its first allocation):
# an elementwise op that allocates a 200 MB result spent most of its time faulting in 4 KiB pages (83 ms
# against 20 ms for x * y over 49 M floats; docs/SPEED.md). Numbers do not change; set it to 0 to opt out.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
