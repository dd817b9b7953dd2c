"""Training parity of torchtitan's native model against HF (`moe_bench.native.training`) on the built-in checkpoints of
the families the notebook does not run (it runs deepseek_v3): one test per family."""

import pytest

from moe_bench.compare import HF_RELATIVE
from moe_bench.gradients import STEPS


def _check(model: str, applicable: int) -> dict:
    from moe_bench.native.training import native_training

    rec = native_training(model)
    assert rec["gradients"]["float32"]["status"] == "PASS", rec["gradients"]["float32"]["worst"]
    assert rec["mutations_caught"] == f"{applicable}/{applicable}", rec["mutations"]
    assert rec["counts"]["tensors"] == rec["learned"]["learned_by_both"] and not rec["learned"]["differences"]
    assert len(rec["steps"]) == STEPS and all(r["titan_float32"] == 1.0 for r in rec["routing"])
    return rec


@pytest.mark.parametrize("model", ["qwen3_moe"])
def test_qwen3_moe(model):
    "Qwen3-MoE: every float32 gradient passes, both mutations that apply are caught, and a weight tensor whose move"
    " fails the rule after a step passes it on the elements AdamW does not amplify."
    rec = _check(model, 2)
    for row in rec["steps"]:
        for key, hot in row["weights"]["amplified"].items():
            assert hot["ratio_without"] <= HF_RELATIVE, (row["step"], key, hot)


@pytest.mark.parametrize("model", ["gpt_oss"])
def test_gpt_oss(model):
    "gpt-oss: every float32 gradient passes, the three mutations that apply (its learned biases frozen among them) are"
    " caught, and its router rows with no gradient in HF are named where Titan's rounding moves them."
    rec = _check(model, 3)
    assert next(m for m in rec["mutations"] if m["name"] == "learned bias frozen")["caught"]
    for row in rec["steps"]:
        for key, hot in row["weights"]["amplified"].items():
            assert hot["ratio_without"] <= HF_RELATIVE or hot["titan_nonzero_there"] > 0, (row["step"], key, hot)
