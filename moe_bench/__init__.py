__version__ = "0.1.0"

import os as _os

# Large CPU tensors in transparent huge pages: production-width expert weights are gigabytes, and faulting them in 4 KiB
# pages was a third of phase 3's CPU time (system time). torch reads this once, at its first allocation, so it is set
# here, before moe_bench imports torch; THP_MEM_ALLOC_ENABLE=0 in the environment keeps the kernel's default.
_os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
