"""Pipeline parallelism in phase 4 (`moe_bench.pipeline_hf`) for every phase-4-runnable model type (`phase4_gate` on
`reports/<model>/probe.json`): `reports/<model>/pipeline.json`, up to 6 models per torchrun launch of 4 gloo processes.

    python scripts/pipeline_batch.py                          # every runnable type
    python scripts/pipeline_batch.py --models qwen3_moe,dbrx  # some
"""

import argparse
import time

from moe_bench.core import read_json, reports_root, save_record
from moe_bench.parallelism import phase4_gate
from moe_bench.pipeline_hf import pipeline_batch

if __name__ == "__main__":
    args = argparse.ArgumentParser()
    args.add_argument("--models", help="comma-separated model types (default: every one with a probe record)")
    args.add_argument(
        "--out-dir", default="", help="where the records go (default: the reports root, where the probes are)"
    )
    a = args.parse_args()
    probes = {p.parent.name: p for p in sorted(reports_root().glob("*/probe.json"))}
    models = a.models.split(",") if a.models else list(probes)
    runnable = [m for m in models if m in probes and phase4_gate(m, read_json(probes[m])) is None]
    skipped = sorted(set(models) - set(runnable))
    print(f"{len(runnable)} phase-4-runnable; not run: {skipped}")
    start = time.perf_counter()
    for model, rec in pipeline_batch(runnable).items():
        save_record(rec, a.out_dir)
        runs = {
            c["name"]: c["status"] for c in rec.get("configs", []) + ((rec.get("prototype") or {}).get("configs") or [])
        }
        print(model, rec["status"], rec.get("reason") or runs, rec.get("worker_wall_s"), flush=True)
    print(f"batch wall {time.perf_counter() - start:.0f} s")
