"""The backend patches' record, `reports/backend_patches.json`: each patch applied alone, all, and all but each one
(`git apply --check`), torchtitan's formatter and linter on the patched copy, and each patch's control (the backend
phase on every model type the shipped backend does not pass, with every patch but that one, two fresh processes at a
time). `python scripts/backend_patches.py [--models a,b] [--out DIR]`; about ten minutes for every type on 2 cores."""

import argparse

from moe_bench.backend.phase import patches_record
from moe_bench.core import reports_root, write_json_atomic
from moe_bench.coverage import moe_model_candidates, out_of_scope
from moe_bench.doc_backend import PATCHES_RECORD

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--models", default="", help="model types, comma-separated (default: every in-scope type)")
parser.add_argument("--out", default="", help="reports root (default reports/, or $MOE_BENCH_REPORTS)")
args = parser.parse_args()
models = [m for m in args.models.split(",") if m] or [m for m in moe_model_candidates() if not out_of_scope(m)]
record = patches_record(models)
path = reports_root(args.out) / PATCHES_RECORD
write_json_atomic(path, record)
print(f"{record['status']}: {path}")
for name, control in record["controls"].items():
    print(f"  {name}: fixes {', '.join(control['fixes']) or 'nothing'}")
