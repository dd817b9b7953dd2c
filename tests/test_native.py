"""Native torchtitan models (Qwen3-MoE, DeepSeek-V3, and gpt-oss through moe_bench's prototype adapter) against HF on
the built-in trained checkpoints: both dtypes pass, every negative control fails, random weights let the
correction-bias mistake through, and a broken conversion or checkpoint is named."""

import json

import pytest
import torch

from moe_bench.checkpoint import open_checkpoint
from moe_bench.native import (
    CONTROLS,
    NATIVE,
    RIGHT,
    Control,
    NativeLoadError,
    compare_native,
    native_phase,
    native_verdict,
    random_controls,
    run_control,
)
from moe_bench.pretrained import input_ids
from moe_bench.trained import builtin_checkpoint

from conftest import REPO

MODELS = list(NATIVE)


@pytest.fixture(scope="module")
def checkpoints():
    "Each native model's trained checkpoint, and the held-out input ids."
    out = {}
    for model in MODELS:
        ckpt = open_checkpoint(builtin_checkpoint(model))
        out[model] = (ckpt, input_ids(ckpt)[0])
    return out


@pytest.mark.parametrize("model", MODELS)
def test_native_matches_hf(model, checkpoints):
    "float32 at HF's own rounding on every layer, stream and the logits, top-1 100%; bfloat16 within HF's own bound."
    res = compare_native(*checkpoints[model])
    verdict = native_verdict(res)
    assert verdict["status"] == "PASS" and verdict["first_divergence"] is None, verdict
    assert res["logits"]["float32"]["titan"]["top1_agreement"] == 1.0
    assert res["embeddings_equal"]
    moe = [r for r in res["layers"] if r["kind"] == "moe"]
    assert moe and all(r["float32"]["routing_agreement"] == 1.0 for r in moe)
    assert len(res["layers"]) == checkpoints[model][0].config.num_hidden_layers


CASES = [(m, c) for m in MODELS for c in CONTROLS if c.applies(open_checkpoint(builtin_checkpoint(m)).config)]


# Where each mistake must first show: the attention block (eps: its input norm; q/k; sinks) or the FFN/MoE block
STAGE = {"two experts swapped": "ffn", "gate/up swapped": "ffn", "score-correction bias zeroed": "ffn"}
STAGE |= {"experts reshaped instead of transposed": "ffn", "q/k rows permuted where RoPE needs none": "attention"}
STAGE |= {"attention sinks off": "attention", CONTROLS[0].name: "attention"}


@pytest.mark.parametrize("model,control", CASES, ids=[f"{m}-{c.name}" for m, c in CASES])
def test_negative_control_fails(model, control, checkpoints):
    "Each control FAILs, and the first divergence names the sub-stage the mistake is in."
    row = run_control(*checkpoints[model], control)
    assert row["caught"] and row["status"] == "FAIL", row
    assert row["first_divergence"]["stage"] == STAGE[control.name], row["first_divergence"]


def test_random_weights_miss_the_bias(checkpoints):
    "On HF's random initialisation the correction bias is zero: dropping it passes there, and is caught when trained."
    bias = next(c for c in CONTROLS if c.name == "score-correction bias zeroed")
    rows = {r["control"]: r for r in random_controls(*checkpoints["deepseek_v3"], [bias])}
    assert rows[RIGHT]["status"] == "PASS" and not rows[bias.name]["caught"]


def test_a_lost_key_is_named(checkpoints):
    drop = Control(name="q_norm lost", state=lambda sd, v: {k: t for k, t in sd.items() if "q_norm" not in k})
    with pytest.raises(NativeLoadError, match=r"missing \['attention.q_norm.weight'\]"):
        run_control(*checkpoints["qwen3_moe"], drop)


def test_phase_record_and_refusals(checkpoints):
    rec = native_phase("qwen3_moe", controls=False)
    committed = json.loads((REPO / "reports" / "qwen3_moe" / "native.json").read_text())
    assert (rec["status"], rec["checkpoint"]) == (committed["status"], committed["checkpoint"])  # it regenerates
    assert rec["status"] == "PASS" and rec["phase"] == "native" and rec["controls"] == []
    assert {r["titan"] for r in rec["mapping"]} >= {"eps", "dim", "route_norm", "moe_layers"}
    assert native_phase("mixtral")["status"] == "UNSUPPORTED"
    folder = str(checkpoints["qwen3_moe"][0].folder)
    assert "holds a qwen3_moe model" in native_phase("deepseek_v3", folder)["reason"]
    assert torch.finfo(torch.float32).eps == rec["summary"]["float32_eps"]
