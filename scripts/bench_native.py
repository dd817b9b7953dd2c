"""The native phase's memory, measured on deep checkpoints: the same seeded random qwen3_moe checkpoint shape as
`bench_pretrained.py` at two depths, each run of `native_phase` (both dtypes, no controls) in a fresh subprocess.

    python scripts/bench_native.py                      # 12 and 48 layers, hidden 256
    python scripts/bench_native.py --layers 12 96 --hidden 512

Printed per depth: the checkpoint's size, the phase's status, wall time, and its peak resident memory above the
post-import baseline. Streaming holds one layer of each model at a time (in its dtypes), so the peak must not grow
with depth by the layers it streams.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pretrained import make_checkpoint  # noqa: E402  (the same checkpoint shape as phase 3b's benchmark)

CHILD = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
import torch
import moe_bench.native as native

def status_gb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"): return int(line.split()[1]) / 1024**2

base = status_gb("VmRSS")
t = time.perf_counter()
rec = native.native_phase("qwen3_moe", sys.argv[1], controls=False)
print(json.dumps(dict(status=rec["status"], wall_s=round(time.perf_counter() - t, 2), baseline_gb=round(base, 3),
                      peak_gb=round(status_gb("VmHWM"), 3), layers=len(rec["layers"]))))
"""


def run(folder: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--layers", type=int, nargs="+", default=[12, 48])
    args.add_argument("--hidden", type=int, default=256)
    a = args.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for layers in a.layers:
            folder = Path(tmp) / f"deep{layers}"
            size = make_checkpoint(folder, layers, a.hidden)
            r = run(folder)
            above = r["peak_gb"] - r["baseline_gb"]
            print(
                f"{layers:>3} layers, hidden {a.hidden}: {size['disk_gb'] * 1024:6.0f} MB on disk, "
                f"{size['layer_gb'] * 1024:.1f} MB a layer, {size['head_gb'] * 1024:.1f} MB head | native {r['status']} "
                f"in {r['wall_s']:.1f} s, peak above baseline {above * 1024:.0f} MB "
                f"({above / size['layer_gb']:.1f} layers' worth)",
                flush=True,
            )
