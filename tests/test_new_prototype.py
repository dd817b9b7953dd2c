"""A new prototype is its module and its row in `EXPRESSIONS` (issue 42). Built in a temporary copy of the package, a
stand-in prototype (the core's expression under another name, with an experts class of its own) is picked up by every
phase that reads expressions, with no other file touched: the probe and the equivalence phase name it, phase 4's CPU
adaptation makes its experts compute in the input dtype, and the gap analysis' experts patches reach its seam."""

import json
import os
import shutil
import subprocess
import sys

from conftest import REPO

PROTOTYPE = """
import dataclasses

from torchtitan.models.common.moe import GroupedExperts

from ..expression import CORE


class TaggedExperts(GroupedExperts):
    compute_in_input_dtype = False  # follows upstream's bfloat16 unless told


TAGGED = dataclasses.replace(
    CORE,
    name="tagged_core",
    kind="prototype",
    core_changes=("tagged_core: a test's stand-in for a core change",),
    cpu_input_dtype=(TaggedExperts,),
    aligned_experts=((TaggedExperts, "forward"),),
)
"""

CHECK = """
import json
from moe_bench import alignment, cpu_compat
from moe_bench.equivalence import equivalence_phase
from moe_bench.probe import probe_model
from moe_bench.prototypes.tagged_core import TaggedExperts

probe, eq = probe_model("qwen3_moe"), equivalence_phase("qwen3_moe", small=True)
adapted = [row["target"] for row in cpu_compat.apply(cpu=True)]
cpu_compat.revert()
with alignment.experts_float32():
    aligned = TaggedExperts.forward is alignment.ALIGNED_SEAMS["forward"]
checks = {c["name"]: c["status"] for c in eq.get("prototype_checks") or []}
print(json.dumps(dict(probe=probe["expression"], equivalence=eq["expression"], status=eq["status"], checks=checks,
                      adapted=adapted, aligned=aligned, restored=TaggedExperts.forward is not alignment.ALIGNED_SEAMS["forward"])))
"""


def test_a_new_prototype_is_one_module_and_one_row(tmp_path):
    copy = tmp_path / "pkg" / "moe_bench"
    shutil.copytree(REPO / "moe_bench", copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "prototypes" / "tagged_core.py").write_text(PROTOTYPE)
    index = copy / "prototypes" / "__init__.py"
    text = index.read_text()
    assert "EXPRESSIONS: tuple[Expression, ...] = (\n" in text
    text = text.replace("from .clamped_glu import", "from .tagged_core import TAGGED\nfrom .clamped_glu import", 1)
    index.write_text(
        text.replace(
            "EXPRESSIONS: tuple[Expression, ...] = (\n", "EXPRESSIONS: tuple[Expression, ...] = (\n    TAGGED,\n"
        )
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "pkg"), MOE_BENCH_REPORTS=str(tmp_path / "reports"))
    done = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert (found["probe"], found["equivalence"]) == ("tagged_core", "tagged_core"), found
    # the status is torchtitan's alone (a prototype stands for a core change: BLOCKED); the prototype's check passes
    checks = found["checks"]  # named after it (with the extension that passes, where one is needed)
    assert found["status"] == "BLOCKED" and any(k.startswith("tagged_core") and v == "PASS" for k, v in checks.items())
    assert "TaggedExperts.compute_in_input_dtype" in found["adapted"], found["adapted"]
    assert found["aligned"] and found["restored"], found
