"""Checkpoints as publishers ship them (issue 40, first part): FP8 and MXFP4 folders written in the publishers' layouts,
read by transformers' own quantizer in phase 3b, each dequantized tensor held to the format's definition before any
forward; the faults of quantized files, each a named status."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from moe_bench.checkpoint import FAULTS, INDEX
from moe_bench.native.phase import native_phase
from moe_bench.pretrained import pretrained_phase
from moe_bench.published import published_config, save_published
from moe_bench.quant import quantize_folder
from moe_bench.runner import main

from conftest import REPO

QUANTIZED = {"deepseek_v3": "fp8", "qwen3_moe": "fp8", "gpt_oss": "mxfp4"}  # as DeepSeek, Qwen (-FP8), OpenAI ship


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    "The built-in trained checkpoints rewritten in their publishers' quantized layouts."
    root = tmp_path_factory.mktemp("quantized")
    return {m: quantize_folder(REPO / "checkpoints" / m, root / m, method) for m, method in QUANTIZED.items()}


@pytest.mark.parametrize("model", list(QUANTIZED))
def test_a_quantized_checkpoint_runs_3b_with_hf_own_dequantization_checked(folders, model):
    rec, _ = pretrained_phase(model, str(folders[model]))
    dq = rec["dequantization"]
    assert dq["method"] == QUANTIZED[model] and dq["compared"] > 0 and rec["status_strict"] == "PASS", rec["reason"]
    if model == "deepseek_v3":  # reduced widths of 192: HF's blocks are 96 rows or columns, not the format's 128
        assert not dq["exact"] and list(dq["causes"]) == ["grid_rule_fp8"] and not dq["unexplained"]
        assert "derives the block size from the scale grid" in rec["reason"] and rec["status"] in ("WARN", "FAIL")
    else:
        assert dq["exact"], dq["findings"]


def test_the_command_line_takes_a_quantized_folder(folders, tmp_path):
    "No exit 2 for a well-formed quantized folder: the command line's up-front check lets it through to 3b."
    argv = ["run", "gpt_oss", "--checkpoint", str(folders["gpt_oss"]), "--phases", "3b", "--out", str(tmp_path)]
    assert main([*argv, "--dry-run"]) == 0
    broken = shutil.copytree(folders["gpt_oss"], tmp_path / "broken")
    _config(broken, quant_method="int3")
    assert main(["run", "gpt_oss", "--checkpoint", str(broken), "--phases", "3b", "--dry-run"]) == 2


def test_native_names_what_it_does_not_yet_read(folders):
    rec = native_phase("qwen3_moe", str(folders["qwen3_moe"]), controls=False, random_baseline=False)
    assert rec["status"] == "UNSUPPORTED" and "torchtitan's own checkpointer" in rec["reason"], rec


def test_published_deepseek_kv_a_shape_does_not_load_in_hf(tmp_path):
    "DeepSeek-V3's published kv_a_proj_with_mqa, 576 rows in 5 row blocks: transformers' CPU loader cannot load it."
    cfg = published_config("deepseek_v3", kv_lora_rank=512, qk_rope_head_dim=64)
    bf16 = save_published(tmp_path / "bf16", cfg)
    rec, _ = pretrained_phase("deepseek_v3", str(quantize_folder(bf16, tmp_path / "fp8", "fp8")))
    assert rec["status"] == "FAIL" and rec["fault"] == "library", rec
    assert "transformers' own fp8 loader" in rec["reason"] and "not divisible" in rec["reason"], rec["reason"]


def test_hf_from_pretrained_in_float32_on_fp8_runs_nothing(folders):
    "Reproduced: from_pretrained(dtype=float32) on an FP8 folder (its other tensors in bf16, as published) leaves the"
    " dequantized weights in float32 beside bfloat16 ones, and the forward raises; as stored (bfloat16) it runs."
    mixed = AutoModelForCausalLM.from_pretrained(folders["qwen3_moe"], dtype=torch.float32)
    assert {p.dtype for p in mixed.parameters()} == {torch.bfloat16, torch.float32}
    assert mixed.model.layers[0].self_attn.q_proj.weight.dtype == torch.float32
    assert mixed.model.layers[0].input_layernorm.weight.dtype == torch.bfloat16
    with pytest.raises(RuntimeError, match="same dtype"):
        mixed(torch.tensor([[1, 2, 3]]))
    stored = AutoModelForCausalLM.from_pretrained(folders["qwen3_moe"])
    assert {p.dtype for p in stored.parameters()} == {torch.bfloat16} and stored(
        torch.tensor([[1, 2, 3]])
    ).logits.isfinite().all()


def _tensors(folder, change):
    "Apply `change(state_dict)` to the shard holding layer 1's q_proj, keeping the index true."
    index = json.loads((folder / INDEX).read_text())
    shard = index["weight_map"]["model.layers.1.self_attn.q_proj.weight"]
    sd = load_file(folder / shard)
    change(sd)
    save_file(sd, folder / shard, metadata={"format": "pt"})
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != shard} | dict.fromkeys(sd, shard)
    (folder / INDEX).write_text(json.dumps(index))


def _config(folder, **quant):
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(raw | {"quantization_config": raw["quantization_config"] | quant}))


KEY = "model.layers.1.self_attn.q_proj.weight"
QUANT_FAULTS = {  # how a quantized file breaks -> (fault, what the reason names)
    "a missing scale": ("fp8", lambda f: _tensors(f, lambda sd: sd.pop(f"{KEY}_scale_inv")), "quantized", KEY),
    "a scale grid that does not cover the weight": (
        "fp8",
        lambda f: _tensors(f, lambda sd: sd.update({f"{KEY}_scale_inv": sd[f"{KEY}_scale_inv"][:0]})),
        "quantized",
        "needs F32",
    ),
    "a NaN scale": (
        "fp8",
        lambda f: _tensors(f, lambda sd: sd[f"{KEY}_scale_inv"].fill_(float("nan"))),
        "non_finite",
        "q_proj",
    ),
    "an Inf scale": (
        "fp8",
        lambda f: _tensors(f, lambda sd: sd[f"{KEY}_scale_inv"].fill_(float("inf"))),
        "non_finite",
        "q_proj",
    ),
    "an unknown quant_method": ("fp8", lambda f: _config(f, quant_method="int3"), "quantized", "'int3'"),
    "blocks of the wrong byte length": (
        "mxfp4",
        lambda f: _blocks_cut(f),
        "quantized",
        "16 bytes a group",
    ),
}


def _blocks_cut(folder):
    index = json.loads((folder / INDEX).read_text())
    key = "model.layers.1.mlp.experts.down_proj_blocks"
    sd = load_file(folder / index["weight_map"][key])
    sd[key] = sd[key][..., :15].contiguous()
    save_file(sd, folder / index["weight_map"][key], metadata={"format": "pt"})


@pytest.mark.parametrize("fault", list(QUANT_FAULTS))
def test_each_fault_of_a_quantized_file_is_a_named_status(folders, tmp_path, fault):
    method, change, kind, says = QUANT_FAULTS[fault]
    model = "qwen3_moe" if method == "fp8" else "gpt_oss"
    folder = shutil.copytree(folders[model], tmp_path / "bad")
    change(folder)
    rec, _ = pretrained_phase(model, str(folder))
    assert rec["fault"] == kind and rec["status"] == FAULTS[kind].status and says in rec["reason"], rec


def _with_mtp(folder):
    "DeepSeek-V3's multi-token-prediction layer as its files hold it: at index num_hidden_layers, a whole decoder layer"
    " (here a copy of the last one) with enorm, hnorm, eh_proj, shared_head and embed_tokens, in a shard of its own."
    raw = json.loads((folder / "config.json").read_text())
    depth, hidden, vocab = raw["num_hidden_layers"], raw["hidden_size"], raw["vocab_size"]
    index = json.loads((folder / INDEX).read_text())
    last = {k: s for k, s in index["weight_map"].items() if k.startswith(f"model.layers.{depth - 1}.")}
    gen = torch.Generator().manual_seed(0)
    mtp = {k.replace(f".{depth - 1}.", f".{depth}.", 1): load_file(folder / s)[k] for k, s in last.items()}
    for name, shape in {
        "enorm.weight": (hidden,),
        "hnorm.weight": (hidden,),
        "eh_proj.weight": (hidden, 2 * hidden),
        "shared_head.norm.weight": (hidden,),
        "shared_head.head.weight": (vocab, hidden),
        "embed_tokens.weight": (vocab, hidden),
    }.items():
        mtp[f"model.layers.{depth}.{name}"] = torch.randn(shape, generator=gen).to(torch.bfloat16)
    save_file(mtp, folder / "mtp.safetensors", metadata={"format": "pt"})
    index["weight_map"] |= dict.fromkeys(mtp, "mtp.safetensors")
    (folder / INDEX).write_text(json.dumps(index))
    (folder / "config.json").write_text(json.dumps(raw | {"num_nextn_predict_layers": 1}))


def test_an_mtp_layer_is_named_as_what_hf_does_not_load(folders, tmp_path):
    folder = shutil.copytree(folders["deepseek_v3"], tmp_path / "mtp")
    _with_mtp(folder)
    rec, _ = pretrained_phase("deepseek_v3", str(folder))
    depth = json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    skipped = rec["not_loaded_by_hf"]
    assert skipped["layers"] == [depth] and {"eh_proj", "enorm", "hnorm", "shared_head", "mlp"} <= set(skipped["parts"])
    assert rec["status_strict"] == "PASS" and "fault" not in rec, rec
    # HF itself ignores an MTP layer by a hard-coded name (model.layers.61): at any other depth its keys are unexpected
    _, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    assert {k for k in info["unexpected_keys"] if k.startswith(f"model.layers.{depth}.")}
