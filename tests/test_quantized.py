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
from moe_bench.published import published_config, save_published, with_mtp_layer
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


def test_a_key_torchtitans_loader_drops_is_named_in_a_fail(monkeypatch):
    "torchtitan's checkpointer loads non-strictly: a tensor its adapter does not map stays as initialised. Dropping"
    " q_norm from Qwen3's map (in-process, undone after) leaves it unloaded, and the phase FAILs naming it."
    from torchtitan.models.qwen3.state_dict_adapter import Qwen3StateDictAdapter

    init = Qwen3StateDictAdapter.__init__

    def without_q_norm(self, *a, **k):
        init(self, *a, **k)
        self.from_hf_map.pop("model.layers.{}.self_attn.q_norm.weight")

    monkeypatch.setattr(Qwen3StateDictAdapter, "__init__", without_q_norm)
    rec = native_phase("qwen3_moe", "", controls=False, random_baseline=False)
    assert rec["status"] == "FAIL" and rec["loader"]["unloaded"] == {"layers.0.attention.q_norm.weight": 1.0}, rec
    assert "leaves 1 tensors unloaded (layers.0.attention.q_norm.weight" in rec["reason"], rec["reason"]


def test_published_deepseek_kv_a_shape_does_not_load_in_hf(tmp_path):
    "DeepSeek-V3's published kv_a_proj_with_mqa, 576 rows in 5 row blocks: transformers' CPU loader cannot load it."
    cfg = published_config("deepseek_v3", kv_lora_rank=512, qk_rope_head_dim=64, head_dim=64)
    bf16 = save_published(tmp_path / "bf16", cfg)
    fp8 = quantize_folder(bf16, tmp_path / "fp8", "fp8")
    rec, _ = pretrained_phase("deepseek_v3", str(fp8))
    assert rec["status"] == "FAIL" and rec["fault"] == "library", rec
    assert "transformers' own fp8 loader" in rec["reason"] and "not divisible" in rec["reason"], rec["reason"]
    # native goes on: torchtitan's loader reads the file exactly as defined, so the comparison runs on the definition
    native = native_phase("deepseek_v3", str(fp8), controls=False, random_baseline=False)
    assert native["fault"] == "library" and native["status"] == "FAIL", native["reason"]
    # torch's quantized reader finds scales through model.safetensors.index.json alone: this one-file folder has none
    assert "model.safetensors.index.json" in native["reason"] and "IndexFreeQuantizedReader" in native["reason"]
    assert native["on_definition"]["status"] == "PASS" and "HF's forward on weights it did not load" in native["reason"]


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


@pytest.fixture(scope="module")
def mtp_folders(tmp_path_factory):
    "DeepSeek-V3 with its MTP layer as DeepSeek's files hold it: in bfloat16, and quantized to FP8 after, as published."
    root = tmp_path_factory.mktemp("mtp")
    bf16 = with_mtp_layer(shutil.copytree(REPO / "checkpoints" / "deepseek_v3", root / "bf16"))
    return dict(bf16=bf16, fp8=quantize_folder(bf16, root / "fp8", "fp8"))


def test_an_mtp_layer_is_named_as_what_hf_does_not_load(mtp_folders):
    folder = mtp_folders["fp8"]
    rec, _ = pretrained_phase("deepseek_v3", str(folder))
    depth = json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    skipped = rec["not_loaded_by_hf"]
    assert skipped["layers"] == [depth] and {"eh_proj", "enorm", "hnorm", "shared_head", "mlp"} <= set(skipped["parts"])
    assert rec["status_strict"] == "PASS" and "fault" not in rec, rec
    # HF itself ignores an MTP layer by a hard-coded name (model.layers.61): at any other depth its keys are unexpected
    _, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    assert {k for k in info["unexpected_keys"] if k.startswith(f"model.layers.{depth}.")}


def test_native_builds_loads_and_judges_the_mtp_layer(mtp_folders):
    "torchtitan's DeepSeek-V3 with its MTP module, read by torchtitan's loader; the layer judged as far as HF can judge"
    " it (its block against HF's decoder layer class, its fusion by DeepSeek's definition), its control caught."
    rec = native_phase("deepseek_v3", str(mtp_folders["bf16"]), controls=False, random_baseline=False)
    (m,) = rec["mtp"]
    assert rec["status"] == "PASS" and m["status"] == "PASS" and m["control"]["caught"], rec.get("reason")
    assert m["float32"]["ratio"] <= 4 and set(m["stages_float32"]) == {"attention", "ffn"}, m
    assert any("HF's own decoder layer class" in j for j in m["judged"]) and m["not_judged"]
    assert any(
        p["part"].startswith("MTP layer") and p["used"] == "torchtitan as shipped" for p in rec["loader"]["parts"]
    )
    fp8 = native_phase("deepseek_v3", str(mtp_folders["fp8"]), controls=False, random_baseline=False)
    assert fp8["on_definition"]["mtp"][0]["status"] == "PASS" and fp8["status"] == "WARN", fp8["reason"]


def test_an_mtp_head_copy_unlike_the_models_is_named(mtp_folders, tmp_path):
    "torchtitan's MTP layer uses the model's own head: a checkpoint whose MTP head copy differs is a FAIL saying so."
    folder = shutil.copytree(mtp_folders["bf16"], tmp_path / "mtp")
    depth = json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    key = f"model.layers.{depth}.shared_head.head.weight"
    index = json.loads((folder / INDEX).read_text())
    shard = folder / index["weight_map"][key]
    sd = load_file(shard)
    sd[key] = (sd[key].float() * 1.5).to(sd[key].dtype)
    save_file(sd, shard, metadata={"format": "pt"})
    rec = native_phase("deepseek_v3", str(folder), controls=False, random_baseline=False)
    assert rec["status"] == "FAIL" and "shared_head.head.weight differ from the model's" in rec["reason"], rec["reason"]
