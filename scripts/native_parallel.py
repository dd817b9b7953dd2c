"""Records of torchtitan's native models under torchtitan's own parallelism: `reports/<model>/native_parallel.json`
(`moe_bench.native.parallel`, one torchrun launch of 4 gloo processes per family), then the pages and the doc.

    python scripts/native_parallel.py                 # qwen3_moe, deepseek_v3, gpt_oss
    python scripts/native_parallel.py deepseek_v3     # one family
"""

import sys

from moe_bench.compat_doc import write_docs
from moe_bench.core import save_record
from moe_bench.native.mapping import NATIVE
from moe_bench.native.parallel import native_parallel

if __name__ == "__main__":
    for model in sys.argv[1:] or list(NATIVE):
        rec = native_parallel(model)
        print(model, rec["status"], {c["name"]: c["status"] for c in rec.get("configs", [])}, rec.get("wall_s"))
        save_record(rec)
    write_docs()
