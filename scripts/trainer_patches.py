"""Each trainer patch's control (issue 41): the trainer phase's launches for a type with every patch, then without
each trainer patch; saves reports/backend_trainer_patches.json. Usage: python scripts/trainer_patches.py"""

from moe_bench.backend.patches import TRAINER_PATCHES
from moe_bench.backend.trainer_phase import trainer_patch_controls
from moe_bench.core import write_json_atomic

# the type each patch is proven on: the first whose configurations it changes
ON = {"expert-groups-none": "deepseek_v2", "ep-moe-attribute": "granitemoe"}

if __name__ == "__main__":
    by_model: dict[str, tuple] = {}
    for p in TRAINER_PATCHES:
        model = ON.get(p.name, "qwen3_moe")
        by_model[model] = by_model.get(model, ()) + (p,)
    records = [trainer_patch_controls(model, patches) for model, patches in by_model.items()]
    record = records[0] | dict(
        status="PASS" if all(r["status"] == "PASS" for r in records) else "FAIL",
        controls={k: v for r in records for k, v in r["controls"].items()},
        with_all={r["model_checked"]: r["with_all"] for r in records},
        model_checked=[r["model_checked"] for r in records],
    )
    write_json_atomic("reports/backend_trainer_patches.json", record)
    for name, c in record["controls"].items():
        print(f"{name} ({c['model']}): fixes {sorted(c['fixes']) or 'nothing'}")
    print(record["status"])
