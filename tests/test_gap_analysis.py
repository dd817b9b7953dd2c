"""Gap analysis: traces name a perturbed stage, and torchtitan is left exactly as installed, even on failure."""

import copy
from contextlib import contextmanager, nullcontext

import pytest
import torch
import torchtitan.models.common.moe as titan_moe
from torchtitan.models.common.moe import GroupedExperts
from torchtitan.models.common.token_dispatcher import LocalTokenDispatcher

from moe_bench import alignment
from moe_bench.alignment import PATCHES, Patch, all_patches, torchtitan_digest
from moe_bench.compare import hf_router_gate_float32, moe_input, synthetic_moe_block
from moe_bench.replacement import build_titan_moe
from moe_bench.synth import synthetic_config
from moe_bench.traces import trace_moe


@pytest.fixture(scope="module")
def qwen_bf16():
    syn, _, _ = synthetic_config("qwen3_moe")
    block, probe, _ = synthetic_moe_block(syn, seed=0)
    hf = copy.deepcopy(block).to(torch.bfloat16)
    return hf, probe, moe_input(probe.hidden_size, torch.bfloat16, seed=0)


def _trace(hf, titan, probe, x):
    with hf_router_gate_float32(hf.gate):
        return trace_moe(hf, titan, probe, x)


def test_aligned_titan_is_bit_identical(qwen_bf16):
    hf, probe, x = qwen_bf16
    titan = build_titan_moe(hf, probe, gate_float32=False)
    with all_patches(titan, probe, torch.bfloat16):
        trace = _trace(hf, titan, probe, x)
    assert trace.first_divergence() is None
    assert _trace(hf, titan, probe, x).first_divergence() is not None  # and the patches are gone again


def _bump_logit(m, args, out):
    out = out.clone()
    out[0, 5, 3] += 0.5
    return out


def _bump_weights(m, args, out):
    scores_BLK, ids, scores_BLE = out
    scores_BLK = scores_BLK.clone()
    scores_BLK[0, 5] *= 1.01  # one token's routing weights
    return scores_BLK, ids, scores_BLE


def _bump_expert_rows(m, args, out):
    out = out.clone()
    out[3] += 0.01
    return out


@pytest.mark.parametrize(
    "module, hook, stage",
    [
        ("router.gate", _bump_logit, "router_logits"),
        ("router", _bump_weights, "topk_weights"),
        ("routed_experts.inner_experts", _bump_expert_rows, "combine"),
    ],
)
def test_first_divergence_names_the_perturbed_stage(qwen_bf16, module, hook, stage):
    hf, probe, x = qwen_bf16
    titan = build_titan_moe(hf, probe, gate_float32=False)
    handle = titan.get_submodule(module).register_forward_hook(hook)
    try:
        with all_patches(titan, probe, torch.bfloat16):
            first = _trace(hf, titan, probe, x).first_divergence()
    finally:
        handle.remove()
    assert first["stage"] == stage and first["max_diff"] > 0


@contextmanager
def _raising_patch(titan, probe=None):
    with PATCHES[1].context(titan):  # holds a real class patch while it fails
        raise RuntimeError("a patch that crashes")
        yield


def test_torchtitan_unchanged_when_a_patch_fails(qwen_bf16, monkeypatch):
    hf, probe, _ = qwen_bf16
    originals = (
        LocalTokenDispatcher.combine,
        LocalTokenDispatcher._local_reorder,
        GroupedExperts.forward,
        titan_moe.torch,
    )
    before = torchtitan_digest()
    monkeypatch.setattr(alignment, "PATCHES", PATCHES[:3] + (Patch("boom", "fails on purpose", _raising_patch),))
    rows, _ = alignment.gap_table(hf, probe, torch.bfloat16)
    assert "raised RuntimeError" in rows[-2]["description"] and rows[-1]["patch"] == "final"
    assert torchtitan_digest() == before
    assert (
        LocalTokenDispatcher.combine,
        LocalTokenDispatcher._local_reorder,
        GroupedExperts.forward,
        titan_moe.torch,
    ) == originals


def test_gap_table_reaches_zero_in_both_dtypes(qwen_bf16):
    hf, probe, _ = qwen_bf16
    before = torchtitan_digest()
    for dtype in (torch.bfloat16, torch.float32):
        rows, _ = alignment.gap_table(copy.deepcopy(hf).float(), probe, dtype)
        assert rows[0]["max_diff"] > 0, "the baseline should differ: otherwise the analysis shows nothing"
        assert rows[-1]["max_diff"] == 0.0 and rows[-1]["kernel_check_max_diff"] == 0.0, rows
    assert torchtitan_digest() == before


def test_a_patch_that_cannot_apply_is_not_rerun_and_says_so(qwen_bf16):
    hf, probe, _ = qwen_bf16
    rows, traces = alignment.gap_table(hf, probe, torch.bfloat16)
    carried = [(before, row) for before, row in zip(rows, rows[1:], strict=False) if row.get("applied") is False]
    assert carried, "qwen3_moe at top_k 2 in bfloat16 has patches that cannot apply (token-order sum)"
    for before, row in carried:
        assert "not applied" in row["description"], row
        assert [row[k] for k in ("max_diff", "kl", "first_divergence")] == [
            before[k] for k in ("max_diff", "kl", "first_divergence")
        ]
        assert traces[row["patch"]] is traces[before["patch"]]


def test_running_the_same_computation_again_gives_the_same_row(qwen_bf16, monkeypatch):
    "What carrying a row rests on: a patch that changes nothing, run, measures exactly what the row before it did."
    hf, probe, _ = qwen_bf16
    monkeypatch.setattr(
        alignment, "PATCHES", (PATCHES[0], Patch("null", "changes nothing", lambda t, p: nullcontext()))
    )
    rows, _ = alignment.gap_table(hf, probe, torch.bfloat16)
    assert rows[2]["patch"] == "+null" and "applied" not in rows[2]
    assert [rows[2][k] for k in ("max_diff", "kl", "first_divergence")] == [
        rows[1][k] for k in ("max_diff", "kl", "first_divergence")
    ]
