"""Importing moe_bench first puts torch's large CPU tensors in transparent huge pages: fewer page faults."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
# page faults while a fresh 512 MiB tensor is written, in a process that imports `first` before torch
FAULTS = """import resource, sys
import {first}
import torch
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
torch.empty(128 * 2**20).fill_(1.0)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(first: str, **env) -> int:
    run = subprocess.run(
        [sys.executable, "-c", FAULTS.format(first=first)],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"} | env,
        check=True,
    )
    return int(run.stdout.split()[-1])


@pytest.mark.skipif(
    not THP.exists() or not re.search(r"\[(always|madvise)\]", THP.read_text()), reason="no huge pages on this kernel"
)
def test_moe_bench_first_means_fewer_page_faults():
    with_mb, plain, refused = _faults("moe_bench"), _faults("os"), _faults("moe_bench", THP_MEM_ALLOC_ENABLE="0")
    # 512 MiB is 131072 pages of 4 KiB and 256 of 2 MiB
    assert with_mb * 10 < plain, (with_mb, plain)
    assert refused * 10 > plain, (refused, plain)  # the user's setting wins
