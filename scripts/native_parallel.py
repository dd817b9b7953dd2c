"""Records of torchtitan's native models under torchtitan's own parallelism: `reports/<model>/native_parallel.json`
(`moe_bench.native.parallel`: FSDP, FSDP+EP, TP, FSDP+TP+EP, one torchrun launch of 4 gloo processes per family) and
`reports/<model>/native_pipeline.json` (`moe_bench.native.pipeline`: PP and PP+FSDP+EP through torchtitan's
`pipeline_llm`), each on the built-in checkpoint and, with `--published`, again on a checkpoint written by
transformers' `save_pretrained` from the family's published config (bfloat16 storage) beside it; then the pages and
the doc.

    python scripts/native_parallel.py                          # qwen3_moe, deepseek_v3, gpt_oss
    python scripts/native_parallel.py --published deepseek_v3  # one family, and on a published-config checkpoint
"""

import argparse
import tempfile
from pathlib import Path

from moe_bench.compat_doc import write_docs
from moe_bench.core import save_record
from moe_bench.native.mapping import NATIVE
from moe_bench.native.parallel import native_parallel
from moe_bench.native.pipeline import native_pipeline, published_run

if __name__ == "__main__":
    args = argparse.ArgumentParser()
    args.add_argument("models", nargs="*", default=list(NATIVE))
    args.add_argument("--published", action="store_true", help="also on a save_pretrained published-config folder")
    args.add_argument("--only", choices=("parallel", "pipeline"), help="one of the two records")
    a = args.parse_args()
    runs = {"parallel": native_parallel, "pipeline": native_pipeline}
    for model in a.models:
        for kind, run in runs.items():
            if a.only and kind != a.only:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                rec = published_run(model, run, Path(tmp)) if a.published else run(model)
            local = rec.get("local_checkpoint", {}).get("status")
            print(
                model, kind, rec["status"], {c["name"]: c["status"] for c in rec.get("configs", [])}, local, flush=True
            )
            save_record(rec)
    write_docs()
