"""Every MoE model type in the installed transformers, checked at small widths: probe, round trip,
bfloat16 equivalence and gap analysis. The production-width batch is `moe-bench run --all`, not a CI step."""

import pytest
import torch

from moe_bench.adapter import TITAN_EXPERT_BIAS
from moe_bench.compare import compare_moe_block, meta_moe_block, synthetic_moe_block
from moe_bench.compat_doc import compat_doc, index_html, load_records
from moe_bench.coverage import coverage_check, moe_model_candidates
from moe_bench.doc_backend import load_patches_record
from moe_bench.synth import synthetic_config

from conftest import REPO

# Model types whose differences are not yet explained, with what stops them. This list only shrinks: each
# entry is a strict xfail, so a model that starts passing fails the suite until it is taken off the list.
# (Empty since beam passes with `f32_combine+output_scale+f32_glu`.)
KNOWN_GAPS: dict[str, str] = {}

CANDIDATES = moe_model_candidates()


def test_discovery_finds_the_known_families():
    assert {"qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v3", "olmoe", "glm4_moe", "qwen3_next"} <= set(CANDIDATES)
    assert set(KNOWN_GAPS) <= set(CANDIDATES), set(KNOWN_GAPS) - set(CANDIDATES)


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(m, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[m])) if m in KNOWN_GAPS else m
        for m in CANDIDATES
    ],
)
def test_small_width_coverage(model):
    rec = coverage_check(model)
    assert rec["status"] in ("PASS", "WARN", "BLOCKED", "UNSUPPORTED"), (
        rec["status"],
        rec.get("error") or rec.get("gap_final"),
    )
    if rec["status"] == "BLOCKED":
        assert rec["issues"] and all(":" in i for i in rec["issues"])  # each names what the core lacks
        if rec["block"].get("level") == "layer":  # router and experts beside the dense MLP: the LayerMoE prototype
            assert rec["expression"] == "layer_moe", rec["expression"]
        if rec["expression"]:  # a moe_bench prototype holds it: its verdict stands beside the core's BLOCKED
            assert (rec["status_with_prototype"] or "").startswith(f"PASS with prototype {rec['expression']}")
            assert all(e["negative_control_caught"] and e["roundtrip"] == "PASS" for e in rec["prototype_checks"])
            in_model = [
                e for e in rec["prototype_checks"] if "status_strict" in e
            ]  # judged in the model: its own sweep
            assert all(e["status_strict"] == "PASS" and all(m["caught"] for m in e["mutations"]) for e in in_model)
            if rec["gap"] != "BLOCKED":  # a block-scope prototype's differences are explained to 0 in both dtypes
                assert rec["gap"] == "PASS", rec
                assert rec["gap_final_max_diff_bfloat16"] == 0.0 and rec["gap_final_max_diff_float32"] == 0.0, rec
            else:  # only where its stages cannot be traced, said so
                assert rec["gap_reason"] or rec["block"].get("level") == "layer", rec
    if rec["status"] in ("PASS", "WARN"):
        assert (
            rec["roundtrip"]["max_diff"] == 0.0
            and not rec["roundtrip"]["missing"]
            and not rec["roundtrip"]["unexpected"]
        )
        assert rec["gap_final_max_diff"] == 0.0, rec["gap_final"]
    if "status_strict" in rec:  # compared: the strict verdict passes every explained block and catches its control
        assert rec["negative_control_caught_strict"], rec
        assert rec["mutations"] and all(rec["mutations"].values()), rec["mutations"]  # the sweep: each one caught
        if rec.get("gap_final_max_diff") == 0.0 and rec["gap_final_max_diff_float32"] == 0.0:
            assert rec["status_strict"] == "PASS", rec
    if rec["status"] == "WARN" and rec["expression"] == "core":  # the core falls short: an extension must pass
        assert rec["status_with_extension"], rec["extensions"]  # (torchtitan's model-specific MoEs have none)
    if rec["status"] == "PASS":
        assert rec["status_with_extension"] is None and rec["extensions"] == []


def _bias_models():
    out = []
    for m in CANDIDATES:
        if m in KNOWN_GAPS:
            continue
        try:
            _, p = meta_moe_block(synthetic_config(m, small=True)[0])
        except Exception:
            continue
        if p.score_bias and not p.issues:
            out.append(m)
    return out


BIAS_MODELS = _bias_models()


def test_some_models_carry_a_router_buffer():
    assert len(BIAS_MODELS) >= 5, BIAS_MODELS


def _drop_bias(sd):
    sd = dict(sd)
    sd[TITAN_EXPERT_BIAS] = torch.zeros_like(sd[TITAN_EXPERT_BIAS])  # what a conversion that dropped the key would give
    return sd


@pytest.mark.parametrize("model", BIAS_MODELS)
def test_dropping_the_score_bias_fails(model):
    syn, _, _ = synthetic_config(model, small=True)
    block, probe, _ = synthetic_moe_block(syn)
    assert compare_moe_block(block, probe, torch.bfloat16)["status"] in ("PASS", "WARN")
    dropped = compare_moe_block(block, probe, torch.bfloat16, titan_transform=_drop_bias)
    assert dropped["routing_agreement"] < 1.0  # the buffer really routes
    assert dropped["status"] == "FAIL", dropped["kl"]


def test_committed_docs_match_a_fresh_regeneration():
    root = REPO / "reports"
    records = load_records(root)
    assert (REPO / "MODEL_COMPATIBILITY.md").read_text() == compat_doc(records, load_patches_record(root))
    assert (root / "index.html").read_text() == index_html(records, root)
