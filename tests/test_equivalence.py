"""Phase 3 at production width: qwen3_moe passes, and broken weight mappings are caught (negative controls)."""

import pytest
import torch

from moe_bench.adapter import TITAN_EXPERTS, TITAN_ROUTER
from moe_bench.compare import compare_moe_block, swap_gate_up, synthetic_moe_block
from moe_bench.replacement import titan_roundtrip
from moe_bench.synth import synthetic_config


@pytest.fixture(scope="module")
def qwen_block():
    syn, _, _ = synthetic_config("qwen3_moe")
    block, probe, _ = synthetic_moe_block(syn, seed=0)
    return block, probe


def test_bfloat16_passes(qwen_block):
    res = compare_moe_block(*qwen_block, torch.bfloat16)
    assert res["status"] == "PASS" and res["kl"] < 1e-6 and res["routing_agreement"] == 1.0


def test_roundtrip_is_exact(qwen_block):
    block, probe = qwen_block
    diff = titan_roundtrip(block, probe)
    assert (diff["status"], diff["max_diff"], diff["missing"], diff["unexpected"]) == ("PASS", 0.0, [], [])


def _reverse_experts(sd):
    "Experts' down projections in reverse expert order: every shape still fits."
    sd = dict(sd)
    sd[f"{TITAN_EXPERTS}.w2_EDF"] = sd[f"{TITAN_EXPERTS}.w2_EDF"].flip(0)
    return sd


def _negate_router(sd):
    "Router rows of experts 0 and 1 exchanged: routes to the wrong experts."
    sd = dict(sd)
    w = sd[f"{TITAN_ROUTER}.weight"].clone()
    w[[0, 1]] = w[[1, 0]]
    sd[f"{TITAN_ROUTER}.weight"] = w
    return sd


@pytest.mark.parametrize("corrupt", [swap_gate_up, _reverse_experts, _negate_router])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_corrupted_mapping_fails(qwen_block, corrupt, dtype):
    res = compare_moe_block(*qwen_block, dtype, titan_transform=corrupt)
    assert res["status"] == "FAIL", (corrupt.__name__, res["kl"])
