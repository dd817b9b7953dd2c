"""Each trainer patch's control (issue 41): the trainer phase's launches for one type with every patch, then without
each trainer patch; saves reports/backend_trainer_patches.json. Usage: python scripts/trainer_patches.py [model]"""

import sys

from moe_bench.backend.trainer_phase import trainer_patch_controls
from moe_bench.core import write_json_atomic

if __name__ == "__main__":
    record = trainer_patch_controls(sys.argv[1] if len(sys.argv) > 1 else "qwen3_moe")
    write_json_atomic("reports/backend_trainer_patches.json", record)
    for name, c in record["controls"].items():
        print(f"{name}: fixes {sorted(c['fixes']) or 'nothing'}")
    print(record["status"])
