"""Training parity of torchtitan's native model against HF (`moe_bench.native.training`) on the built-in checkpoints of
the families the notebook does not run (it runs deepseek_v3): one test per family."""

from moe_bench.gradients import STEPS


def _check(model: str, applicable: int) -> dict:
    "The figures every family must give: the whole verdict passes (both dtypes, every step), float32 routes as HF, every mutation caught."
    from moe_bench.native.training import native_training

    rec = native_training(model)
    assert rec["status"] == "PASS", {k: g["worst"] for k, g in rec["gradients"].items()}
    assert rec["mutations_caught"] == f"{applicable}/{applicable}", rec["mutations"]
    assert rec["counts"]["tensors"] == rec["learned"]["learned_by_both"] and not rec["learned"]["differences"]
    assert len(rec["steps"]) == STEPS and all(r["titan_float32"] == 1.0 for r in rec["routing"])
    return rec


def test_qwen3_moe():
    "Qwen3-MoE: both mutations that apply are caught, and the weights after every step pass."
    rec = _check("qwen3_moe", 2)
    assert all(s["weights"]["status"] == "PASS" for s in rec["steps"]), [s["weights"]["worst"] for s in rec["steps"]]


def test_gpt_oss():
    "gpt-oss: its learned biases frozen is caught, the weights after every step pass, and the gradients HF gives as"
    " exactly zero where Titan's are rounding are its routers' (the rows of experts no token chose)."
    rec = _check("gpt_oss", 3)
    assert all(s["weights"]["status"] == "PASS" for s in rec["steps"]), [s["weights"]["worst"] for s in rec["steps"]]
    assert next(m for m in rec["mutations"] if m["name"] == "learned bias frozen")["caught"]
    assert rec["exact_zeros_in_hf"] and all(".mlp.router." in k for k in rec["exact_zeros_in_hf"])
