"""Each trainer patch's control (issue 41): the trainer phase's launches for a type with every patch, then without
each trainer patch; saves reports/backend_trainer_patches.json.

Usage: python scripts/trainer_patches.py [PATCH ...]   (named patches only: the others' controls kept as stored)"""

import sys
from pathlib import Path

from moe_bench.backend.patches import TRAINER_PATCHES
from moe_bench.backend.trainer_phase import trainer_patch_controls
from moe_bench.core import read_json, write_json_atomic

# the type each patch is proven on: the first whose configurations it changes
ON = {
    "expert-groups-none": "deepseek_v2",
    "ep-moe-attribute": "granitemoe",
    "tp-layouts-by-role": "hunyuan_v1_moe",
    "layer-idx-every-mlp": "granitemoeshared",
    "rope-init-keyword": "phimoe",
    "full-width-qk-norm": "olmoe",
    "attention-own-states": "beam",
    "tied-head-alone": "lfm2_moe",
    "stage-hidden-states": "cohere2_moe",
    "tied-gradient-across-stages": "cohere2_moe",
    "dense-mask-any-stage": "deepseek_v32",
    "stage-layer-types": "minimax",
}
RECORD = Path("reports/backend_trainer_patches.json")

if __name__ == "__main__":
    only = set(sys.argv[1:])
    unknown = only - {p.name for p in TRAINER_PATCHES}
    if unknown:
        sys.exit(f"no trainer patch named {sorted(unknown)}")
    stored = read_json(RECORD) if only and RECORD.exists() else {}
    by_model: dict[str, tuple] = {}
    for p in TRAINER_PATCHES:
        if not only or p.name in only:
            model = ON.get(p.name, "qwen3_moe")
            by_model[model] = by_model.get(model, ()) + (p,)
    records = [trainer_patch_controls(model, patches) for model, patches in by_model.items()]
    names = {p.name for p in TRAINER_PATCHES}
    controls = {k: v for k, v in stored.get("controls", {}).items() if k in names}
    controls |= {k: v for r in records for k, v in r["controls"].items()}
    record = records[0] | dict(
        status="PASS" if set(controls) == names and all(v["fixes"] for v in controls.values()) else "FAIL",
        controls=controls,
        with_all=stored.get("with_all", {}) | {r["model_checked"]: r["with_all"] for r in records},
        model_checked=sorted({c["model"] for c in controls.values()}),
    )
    write_json_atomic(RECORD, record)
    for name, c in record["controls"].items():
        print(f"{name} ({c['model']}): fixes {sorted(c['fixes']) or 'nothing'}")
    print(record["status"])
