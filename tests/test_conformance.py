"""Conformance: checkpoints as users have them. For every family with a built-in checkpoint and every published row of
`PRODUCTION_CONFIGS` that 3b serves, transformers' own `save_pretrained` writes a checkpoint from the published config
(depth and widths reduced by the Phase 2 rules so CI can run it; every other field as published: `use_cache` true, bf16
storage, dense layers where the family has them, RoPE scaling as published, `generation_config.json` beside it, a
single file or shards with an index). 3b runs on each, native where torchtitan has the family; every run passes or
stands BLOCKED with its prototype's PASS beside it, and none is an ERROR."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from moe_bench.core import randomize_
from moe_bench.hf import PRODUCTION_CONFIGS
from moe_bench.native import NATIVE, native_phase
from moe_bench.pretrained import PRETRAINED_KL, pretrained_phase
from moe_bench.published import published_config, save_published
from moe_bench.quant import quantize_folder
from moe_bench.runner import summary_line
from moe_bench.trained import TRAINED

FAMILIES = sorted(set(TRAINED) | {m for m in PRODUCTION_CONFIGS if m != "gemma4"})  # gemma4's row is gemma4_text's


def assert_conforms(rec):
    "PASS (or WARN), or BLOCKED with its prototype's PASS beside it; strict PASS; the summary prints. Native's one"
    " known false FAIL (issue 29): a bfloat16 routing choice that differs from HF's at one layer (random weights put"
    " router scores near ties), where float32 passes at HF's own rounding; its reason must name the layer. Native's"
    " one library FAIL: torchtitan's loader as shipped leaving tensors unloaded (gpt-oss), judged with the prototype."
    line = summary_line(rec)
    if rec["phase"] == "native" and rec["status"] == "FAIL":
        if rec["loader"]["status"] == "FAIL":  # torchtitan's loader as shipped leaves tensors unloaded: named, and the
            used = rec["loader"]["judged_with"][-1]  # rest judged with the prototype of the fix that reads them clean
            assert used.startswith("with moe_bench's prototype") and "torchtitan's loader as shipped" in line, line
        if rec["verdict"]["status"] == "FAIL":
            assert rec["verdict"]["float32"]["status"] == "PASS" and "bfloat16 routing differs at layer" in line, line
        return
    if rec["phase"] == "pretrained" and rec["status"] == "FAIL":  # the spec's fixed KL bound, where HF's own bfloat16
        assert rec["status_strict"] == "PASS", line  # run fails it too at every layer it fails (gpt-oss, its clamp
        failing = [r for r in rec["layers"] if r["kind"] == "moe" and r["bfloat16"]["status"] == "FAIL"]  # engaged)
        assert failing and all(r["bfloat16"]["hf_kl"] >= PRETRAINED_KL for r in failing), line
        return
    assert rec["status"] in ("PASS", "WARN", "BLOCKED"), line
    if rec["status"] == "BLOCKED":
        assert (rec.get("status_with_prototype") or "").startswith("PASS with prototype"), line
    if rec["phase"] == "pretrained":
        assert rec["status_strict"] == "PASS", line


# The controls each family's first MoE layer must catch on these weights (its biases and norms non-trivial), beyond
# the gate/up swap every family has; the SwiGLU clamp must engage (the control turning it off must change the output)
FAMILY_CONTROLS = {
    "deepseek_v3": {"score-correction bias zeroed", "shared gate/up swapped"},
    "gpt_oss": {"router bias zeroed", "expert biases zeroed"},
    "qwen2_moe": {"shared expert gate zeroed", "shared gate/up swapped"},
    "qwen3_next": {"shared expert gate zeroed", "shared gate/up swapped"},
}


def assert_controls_caught(rec):
    "3b's sweep ran the family's controls and every one was caught; every setting control changed the output."
    s = rec["summary"]
    ran = set(s["controls_run"])
    assert {"gate/up halves swapped", "expert order reversed", "router rows reversed"} <= ran, ran
    assert FAMILY_CONTROLS.get(rec["model"], set()) <= ran, ran
    assert s["controls_caught"] and not s["controls_missed"], s["controls_missed"]
    assert all(s["settings_reached"].values()), s["settings_reached"]
    if rec["model"] == "gpt_oss":
        assert s["settings_reached"] == {"SwiGLU clamp off": True}, s


@pytest.mark.parametrize("model_type", FAMILIES)
def test_published_config_through_3b_and_native(model_type, tmp_path):
    cfg = published_config(model_type)
    folder = save_published(tmp_path / model_type, cfg, shards=FAMILIES.index(model_type) % 2)
    rec, _ = pretrained_phase(model_type, str(folder))
    assert_conforms(rec)
    dense = getattr(cfg, "first_k_dense_replace", 0) or 0
    assert [r["kind"] for r in rec["layers"]][:dense] == ["dense"] * dense
    window = rec["input"]["longest_window"]
    assert window is None or rec["input"]["shape"][1] > window, rec["input"]  # sliding layers slide
    assert rec["input"]["window_reached"] is (None if window is None else True)
    assert_controls_caught(rec)
    if model_type in NATIVE:
        native = native_phase(model_type, str(folder), controls=False)
        assert_conforms(native)
        assert native["input"] == rec["input"]
        assert set(native["head_shared"]) == {"tok_embeddings", "lm_head"}  # converted bit-exact: one copy, HF's


# Checkpoints as the publishers ship them quantized: DeepSeek-V3 in FP8 (a width of 192: rows not a multiple of the
# 128 block), Qwen3-MoE as Qwen's -FP8 variants, gpt-oss in MXFP4 (widths a multiple of the 32-value group)
QUANTIZED = {
    "deepseek_v3": ("fp8", dict(moe_intermediate_size=192)),
    "qwen3_moe": ("fp8", dict()),
    "gpt_oss": ("mxfp4", dict(intermediate_size=64)),
}


@pytest.mark.parametrize("model_type", list(QUANTIZED))
def test_published_quantized_checkpoint_through_3b_and_native(model_type, tmp_path):
    method, fields = QUANTIZED[model_type]
    bf16 = save_published(tmp_path / "bf16", published_config(model_type, **fields), shards=True)
    folder = quantize_folder(bf16, tmp_path / method, method)
    rec, _ = pretrained_phase(model_type, str(folder))
    if model_type == "gpt_oss" and rec["status"] == "FAIL":  # the spec's fixed bfloat16 KL, missed at a layer where
        line = summary_line(rec)  # HF's own run meets it (MXFP4's coarse experts, top-4 of 16): recorded as the FAIL it
        assert rec["status_strict"] == "PASS" and "spec: bfloat16 KL" in line, line  # is; the strict verdict passes
    else:
        assert_conforms(rec)
    assert rec["dequantization"]["method"] == method and rec["dequantization"]["exact"] is (model_type != "deepseek_v3")
    if model_type == "deepseek_v3":  # the 192-row weights: HF's blocks of 96, named, its cause shown
        assert list(rec["dequantization"]["causes"]) == ["grid_rule_fp8"] and rec["status"] == "WARN", rec["reason"]
    native = native_phase(model_type, str(folder), controls=False)
    assert_conforms(native)
    assert native["input"] == rec["input"]
    assert_loader_as_shipped(native)


# What torchtitan's own loader (DCP with its adapter's storage reader, from_hf, a non-strict load) does with each
# published format as shipped: (the cause it shows, what the reason says); None: it reads the folder exactly
SHIPPED = {
    "qwen3_moe": ("plain_reader_fp8", "e4m3 codes are loaded as numbers"),  # Qwen3's adapter ignores from_quantized
    "gpt_oss": (None, "tensors unloaded"),  # stale expert names; then torch's reader fills 1/32 of each MXFP4 row
    "deepseek_v3": None,  # DeepSeek-V3's adapter returns torch's FP8 reader: exact (HF's blocks are the difference)
}


def assert_loader_as_shipped(rec):
    loader, shipped = rec["loader"], SHIPPED[rec["model"]]
    if shipped is None:
        assert loader["status"] == "PASS" and loader["judged_with"] == ["torchtitan as shipped"], loader
        assert rec["status"] == "WARN" and "derives the block size" in rec["reason"], rec["reason"]
        return
    cause, says = shipped
    assert loader["status"] == "FAIL" and rec["status"] == "FAIL" and says in rec["reason"], rec["reason"]
    assert list(loader["causes"]) == ([cause] if cause else []), loader["causes"]
    steps = list(loader["by_loader"].values())
    assert steps[-1]["clean"] == steps[-1]["parts"] > 0, steps  # the prototype reads every part clean
    if rec["model"] == "gpt_oss":  # the adapter's fix alone shows torch's reader: 1/32 of each expert row read
        assert steps[1]["read_in_part"] == [1 / 32], steps


VARIANTS = {  # the fields a Qwen3-MoE config.json can publish otherwise
    "float16 storage": (dict(), torch.float16),
    "float32 storage": (dict(), torch.float32),
    "tied embeddings": (dict(tie_word_embeddings=True), torch.bfloat16),
    "use_cache false": (dict(use_cache=False), torch.bfloat16),
    "dense layers among MoE (mlp_only_layers)": (dict(mlp_only_layers=[0, 2]), torch.bfloat16),
    "decoder_sparse_step 2": (dict(decoder_sparse_step=2), torch.bfloat16),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_qwen3_moe_variants(variant, tmp_path):
    fields, storage = VARIANTS[variant]
    cfg = published_config("qwen3_moe", **fields)
    folder = save_published(tmp_path / "q", cfg, storage=storage, shards=True)
    rec, _ = pretrained_phase("qwen3_moe", str(folder))
    assert_conforms(rec)
    kinds = [r["kind"] for r in rec["layers"]]
    if "mlp_only_layers" in fields:
        assert kinds == ["dense", "moe", "dense", "moe"], kinds
    if "decoder_sparse_step" in fields:
        assert kinds == ["dense", "moe", "dense", "moe"], kinds
    assert_conforms(native_phase("qwen3_moe", str(folder), controls=False))


def test_a_tensor_that_cannot_tell_a_mapping_is_named(tmp_path):
    "A shared-expert gate of zeros scores every token 0.5 whether or not its weights are read: the control that zeroes"
    " it cannot be caught, so the strict verdict FAILs and says which control, rather than claim the mapping was tested."
    cfg = published_config("qwen2_moe")
    folder = tmp_path / "q"
    model = AutoModelForCausalLM.from_config(cfg)
    randomize_(model, seed=0, std=0.1)
    for name, p in model.named_parameters():
        if name.endswith("shared_expert_gate.weight"):
            p.data.zero_()
    model.to(torch.bfloat16).save_pretrained(folder)
    rec, _ = pretrained_phase("qwen2_moe", str(folder))
    assert rec["status_strict"] == "FAIL" and rec["summary"]["controls_untestable"] == [
        "shared expert gate zeroed (layer 0)"
    ]
    assert not rec["summary"]["controls_missed"], rec["summary"]
    assert "this checkpoint cannot test 1 mappings" in summary_line(rec), summary_line(rec)
