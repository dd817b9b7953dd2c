"""Phase 3b: the built-in trained checkpoints layer by layer, bad checkpoints as clear statuses, the false positive
that random weights let through, and the streaming memory bound."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3MoeConfig

from moe_bench import runner
from moe_bench.checkpoint import INDEX
from moe_bench.core import randomize_
from moe_bench.pretrained import pretrained_phase

from conftest import REPO


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory):
    "A small qwen3_moe checkpoint with random weights, in several shards."
    cfg = Qwen3MoeConfig(
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=32,
        num_experts=8,
        num_experts_per_tok=2,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=300,
        norm_topk_prob=True,
        use_cache=False,
    )
    model = AutoModelForCausalLM.from_config(cfg).eval()
    randomize_(model, seed=0, std=0.1)
    folder = tmp_path_factory.mktemp("ckpt") / "small"
    model.save_pretrained(folder, max_shard_size="50KB")
    return folder


def _copy(src, tmp_path, change):
    folder = tmp_path / "bad"
    shutil.copytree(src, folder)
    change(folder)
    return folder


def _shard(folder):
    return sorted(set(json.loads((folder / INDEX).read_text())["weight_map"].values()))[1]


def _pickled(folder):
    for p in folder.glob("*.safetensors*"):
        p.unlink()
    (folder / "pytorch_model.bin").write_bytes(b"never unpickled")


def _remote(folder):
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(raw | {"auto_map": {"AutoModelForCausalLM": "m.M"}}))


def _quantized(folder):  # a quantization_config claiming MXFP4 over weights stored unquantized
    raw = json.loads((folder / "config.json").read_text())
    quant = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}
    (folder / "config.json").write_text(json.dumps(raw | {"quantization_config": quant}))


def _wrong_shape(folder):
    from safetensors.torch import load_file, save_file

    for shard in sorted(folder.glob("model-*.safetensors")):
        sd = load_file(shard)
        key = next((k for k in sd if k.endswith("k_proj.weight")), None)
        if key:
            sd[key] = sd[key][:-1].clone()
            save_file(sd, shard, metadata={"format": "pt"})
            return


def _missing_tensor(folder):
    from safetensors.torch import load_file, save_file

    raw = json.loads((folder / INDEX).read_text())
    for shard in sorted(folder.glob("model-*.safetensors")):
        sd = load_file(shard)
        key = next((k for k in sd if k.endswith("post_attention_layernorm.weight")), None)
        if key:
            del sd[key]
            del raw["weight_map"][key]
            save_file(sd, shard, metadata={"format": "pt"})
            (folder / INDEX).write_text(json.dumps(raw))
            return


BAD = {
    "no config.json": (lambda f: (f / "config.json").unlink(), "no config.json"),
    "a shard named in the index but absent": (lambda f: (f / _shard(f)).unlink(), "missing"),
    "a truncated safetensors file": (lambda f: os.truncate(f / _shard(f), 100), "truncated"),
    "a *.bin-only folder": (_pickled, "safetensors only"),
    "a config that needs remote code": (_remote, "remote code"),
    "a config saying MXFP4 over unquantized weights": (_quantized, "says mxfp4, but no tensor is stored in it"),
    "a tensor of the wrong shape": (_wrong_shape, "k_proj"),
    "a tensor missing": (_missing_tensor, "post_attention_layernorm"),
}


@pytest.mark.parametrize(
    "defect",  # the wrong shape takes the missing tensor's path once more (37 s): slow, CI holds to 30 minutes
    [pytest.param(d, marks=pytest.mark.slow) if d == "a tensor of the wrong shape" else d for d in BAD],
)
def test_bad_checkpoint_is_a_status(small_checkpoint, tmp_path, reports_tmp, defect, capsys):
    change, says = BAD[defect]
    folder = _copy(small_checkpoint, tmp_path, change)
    rec, _ = pretrained_phase("qwen3_moe", str(folder))
    assert rec["status"] == "UNSUPPORTED" and says in rec["reason"], rec
    # the command line refuses it up front (exit 2, one line, no traceback) when the folder itself cannot be opened;
    # in process (a raise fails the test), the console script itself: tests/test_cli.py
    code = runner.main(["run", "qwen3_moe", "--checkpoint", str(folder), "--no-progress"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert code == 2 or defect in ("a tensor of the wrong shape", "a tensor missing"), err
    assert not any(reports_tmp.glob("*/pretrained.html")) or code != 2  # nothing written for a refused folder


# --- faults: one table (FAULTS), the same status and exit code in 3b and native ------------------------------------
def _nan_expert(folder):
    "One NaN in one expert's down projection of layer 1, as a bad conversion or a cut download leaves it."
    from safetensors.torch import load_file, save_file

    for shard in sorted(folder.glob("model-*.safetensors")):
        sd = load_file(shard)
        key = next((k for k in sd if k.startswith("model.layers.1.") and "down_proj" in k), None)
        if key:
            sd[key][1 if sd[key].ndim == 3 else 0].view(-1)[5] = float("nan")
            save_file(sd, shard, metadata={"format": "pt"})
            return


def _shard_path(name_of):
    "An index naming one shard by another path, the file copied there: the workbench must not read it."

    def change(folder):
        raw = json.loads((folder / INDEX).read_text())
        shard = _shard(folder)
        target = name_of(folder, shard)
        dest = (folder / target) if not os.path.isabs(target) else type(folder)(target)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(folder / shard, dest)
        raw["weight_map"] = {k: (target if v == shard else v) for k, v in raw["weight_map"].items()}
        (folder / INDEX).write_text(json.dumps(raw))

    return change


def _linked_out(folder):
    shard = folder / _shard(folder)
    moved = folder.parent / "elsewhere" / shard.name
    moved.parent.mkdir(exist_ok=True)
    shutil.move(shard, moved)
    shard.symlink_to(moved)


def _expert_count(folder):
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(raw | {"num_local_experts": raw["num_local_experts"] // 2}))


FAULTY = {  # defect -> (change, status, words the reason must hold)
    "a NaN in one expert": (_nan_expert, "FAIL", "NaN"),
    "a shard path through '..'": (
        _shard_path(lambda f, s: f"../outside/{s}"),
        "UNSUPPORTED",
        "not a file of the folder",
    ),
    "a shard that links out of the folder": (_linked_out, "UNSUPPORTED", "outside the folder"),
    "an absolute shard path": (
        _shard_path(lambda f, s: str(f.parent / "elsewhere" / s)),
        "UNSUPPORTED",
        "not a file of the folder",
    ),
    "an expert count the weights disagree with": (_expert_count, "UNSUPPORTED", "does not load strictly"),
}


@pytest.mark.parametrize("defect", list(FAULTY))
def test_a_fault_has_one_status_in_both_phases(small_checkpoint, tmp_path, defect):
    from moe_bench.native import native_phase
    from moe_bench.runner import exit_code, summary_line

    change, status, says = FAULTY[defect]
    folder = _copy(small_checkpoint, tmp_path, change)
    rec_3b, _ = pretrained_phase("qwen3_moe", str(folder))
    rec_native = native_phase("qwen3_moe", str(folder), controls=False)
    for rec in (rec_3b, rec_native):
        assert rec["status"] == status and says in rec["reason"], rec
        assert summary_line(rec)  # every figure the record holds prints
    assert rec_3b["fault"] == rec_native["fault"] and exit_code([rec_3b]) == exit_code([rec_native])
    if defect == "a NaN in one expert":  # the tensor is named, with its layer and expert
        assert "model.layers.1." in rec_3b["reason"] and "down_proj" in rec_3b["reason"], rec_3b["reason"]


def test_use_cache_true_as_published(small_checkpoint, tmp_path):
    "A config.json as every published checkpoint has it (use_cache true): both phases run with no KV cache and PASS."
    from moe_bench.native import native_phase

    def published(folder):
        raw = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(raw | {"use_cache": True}))

    folder = _copy(small_checkpoint, tmp_path, published)
    assert pretrained_phase("qwen3_moe", str(folder))[0]["status"] == "PASS"
    assert native_phase("qwen3_moe", str(folder), controls=False)["status"] == "PASS"


def _hub_cache(cache, hub_id, folder):
    "A Hugging Face cache holding `folder` as `hub_id`'s snapshot, laid out as huggingface_hub writes it."
    repo = cache / f"models--{hub_id.replace('/', '--')}"
    commit = "1" * 40
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for p in folder.iterdir():
        shutil.copy(p, repo / "blobs" / p.name)
        (snap / p.name).symlink_to(os.path.relpath(repo / "blobs" / p.name, snap))
    return snap


def test_hub_id_through_the_local_cache(small_checkpoint, tmp_path, reports_tmp):
    "A hub id is its snapshot in the local cache (HF_HUB_CACHE here), found offline (without one, the download"
    " command: tests/test_cli.py)."
    hub_id = "Qwen/Qwen3-30B-A3B"
    argv = ["moe-bench", "run", "qwen3_moe", "--checkpoint", hub_id, "--no-progress"]
    _hub_cache(tmp_path / "hf_cache", hub_id, small_checkpoint)  # the cache conftest points HF_HUB_CACHE at
    ran = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0 and "pretrained    PASS" in ran.stdout, ran.stdout + ran.stderr[-2000:]


def test_small_checkpoint_streams_and_is_explained(small_checkpoint):
    rec, _ = pretrained_phase("qwen3_moe", str(small_checkpoint))
    assert (rec["status"], rec["status_strict"], rec["explained_at_logits"]) == ("PASS", "PASS", True), rec.get(
        "summary"
    )
    assert [r["kind"] for r in rec["layers"]] == ["moe", "moe"]
    assert all(r["negative_control"]["caught"] for r in rec["layers"])


# --- trained checkpoints -------------------------------------------------------------------------------------------
from moe_bench.adapter import TITAN_EXPERT_BIAS, TITAN_EXPERTS  # noqa: E402
from moe_bench.checkpoint import open_checkpoint  # noqa: E402
from moe_bench.compare import compare_moe_block, materialize_, meta_moe_block  # noqa: E402
from moe_bench.trained import TRAINED, builtin_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def trained_records():
    "Phase 3b on every built-in trained checkpoint (built here on first use: seconds to a minute each)."
    return {m: pretrained_phase(m)[0] for m in TRAINED}


@pytest.mark.parametrize("model", sorted(TRAINED))
def test_every_trained_checkpoint(trained_records, model):
    rec = trained_records[model]
    assert rec.get("layers"), rec.get("issues") or rec.get("reason")  # an expression holds every trained model's blocks
    moe = [r for r in rec["layers"] if r["kind"] == "moe"]
    assert moe and len(rec["layers"]) == open_checkpoint(builtin_checkpoint(model)).config.num_hidden_layers
    assert all(r["negative_control"]["caught"] for r in moe), [r["negative_control"] for r in moe]
    assert all(r["bfloat16"]["strict"] == "PASS" for r in moe), [(r["layer"], r["bfloat16"]) for r in moe]
    assert rec["logits"]["titan"]["top1_agreement"] > 0.95 and rec["status_strict"] == "PASS"
    if "aligned" in rec["logits"]:  # torchtitan's own MoE (core or gpt-oss's) holds every block: all differences known
        assert rec["logits"]["aligned"]["max_diff"] == 0.0 and rec["gap_analysis"]["explained"]
        assert rec["gap_analysis"]["torchtitan_unchanged"]
    else:  # a prototype: its verdict stands beside the core's BLOCKED
        assert rec["status"] == "BLOCKED" and rec["status_with_prototype"].startswith("PASS with prototype")
    assert rec["checkpoint"]["shards"] > 1 and rec["input"]["source"].startswith("tokenizer")
    assert rec["checkpoint"]["training"]["final_loss"] < 5.0  # far below ln(1024) = 6.93, the uniform baseline


@pytest.mark.parametrize("model", sorted(TRAINED))
def test_committed_record_regenerates(trained_records, model):
    "The committed 3b record (reports/MODEL/pretrained.json) is what this machine computes from the shipped checkpoint:"
    " same statuses, same checkpoint (its training run), the folder named the same."
    committed = json.loads((REPO / "reports" / model / "pretrained.json").read_text())
    rec = trained_records[model]
    for field in ("status", "status_strict", "status_with_prototype"):
        assert rec.get(field) == committed.get(field), (field, rec.get(field), committed.get(field))
    assert rec["checkpoint"] == committed["checkpoint"] and rec["checkpoint"]["folder"] == f"checkpoints/{model}"


def swap_two_experts(sd):
    "A wrong conversion: experts 0 and 1 exchanged in the expert weights, not in the router."
    sd = dict(sd)
    for w in ("w1_EFD", "w2_EDF", "w3_EFD"):
        t = sd[f"{TITAN_EXPERTS}.{w}"].clone()
        t[[0, 1]] = t[[1, 0]]
        sd[f"{TITAN_EXPERTS}.{w}"] = t
    return sd


def drop_score_bias(sd):
    "A wrong conversion: the score-correction bias lost (as a non-strict load under another name leaves it)."
    return dict(sd) | {TITAN_EXPERT_BIAS: torch.zeros_like(sd[TITAN_EXPERT_BIAS])}


@pytest.mark.parametrize("model, conversion", [("qwen3_moe", swap_two_experts), ("deepseek_v3", drop_score_bias)])
def test_false_positive_random_weights_pass_trained_catch(model, conversion):
    "The block check on random weights (phase 3's, at the trained model's own sizes) lets the wrong conversion through;"
    " the trained checkpoint, layer by layer on real hidden states, does not."
    config = open_checkpoint(builtin_checkpoint(model)).config
    block, probe = meta_moe_block(config)
    materialize_(block, config)
    random = compare_moe_block(block, probe, torch.bfloat16, titan_transform=conversion)
    assert random["status"] in ("PASS", "WARN"), random  # passed: the spec's verdict cannot see it on random weights
    rec, _ = pretrained_phase(model, conversion=conversion)
    moe = [r for r in rec["layers"] if r["kind"] == "moe"]
    assert rec["status_strict"] == "FAIL" and all(r["bfloat16"]["strict"] == "FAIL" for r in moe), [
        r["bfloat16"] for r in moe
    ]
    assert rec["logits"]["aligned"]["max_diff"] > 0  # and it is no longer explained by the known differences


@pytest.mark.slow  # 46 s: CI holds to 30 minutes
def test_streaming_memory_is_bounded_at_any_depth(tmp_path):
    "Phase 3b in a subprocess on a 48-layer checkpoint (313 MB on disk) and a 12-layer one. The first pass pays"
    " one-time costs (kernel code paged in, oneDNN's primitive cache filling with the shapes the experts' token counts"
    " take: measured 190 MB at 12 layers, 270 MB at 48) and stays within the issue's embeddings + head + 3 layers +"
    " 1 GB; a second pass in the same process, its peak reset, stays within embeddings + head + 3 layers + a fixed"
    " 128 MB, and does not grow with depth by the layers it streams."
    sys.path.insert(0, str(REPO / "scripts"))
    import bench_pretrained as bench

    cold, warm = {}, {}
    for layers in (12, 48):
        size = bench.make_checkpoint(tmp_path / f"deep{layers}", layers, 256)
        run = bench.run("phase_3b", tmp_path / f"deep{layers}")
        cold[layers] = run["peak_gb"] - run["baseline_gb"]
        warm[layers] = run["warm_peak_gb"] - run["warm_baseline_gb"]
    bound = size["head_gb"] + 3 * size["layer_gb"] + 128 / 1024
    assert size["disk_gb"] > bound  # the whole model could not fit in the bound
    assert cold[48] <= bound - 128 / 1024 + 1.0, cold  # the target, one-time costs included
    assert warm[48] <= bound, (warm, bound)
    # keeping the layers would cost 36 x 6.5 = 233 MB for the 36 extra ones, keeping one in four 58 MB: the growth of
    # the second pass with depth must stay under that quarter
    assert warm[48] - warm[12] <= (48 - 12) * size["layer_gb"] / 4, warm


def test_a_layer_too_large_is_refused_with_the_arithmetic(small_checkpoint, monkeypatch):
    "Where one layer in the compared dtypes cannot fit in the memory free, both phases refuse before they start it."
    import moe_bench.checkpoint
    from moe_bench.native import native_phase

    monkeypatch.setattr(moe_bench.checkpoint, "available_gb", lambda: 1e-4)
    recs = [pretrained_phase("qwen3_moe", str(small_checkpoint))[0], native_phase("qwen3_moe", str(small_checkpoint))]
    for rec in recs:
        assert rec["status"] == "UNSUPPORTED" and rec["fault"] == "too_large", rec
        assert "G parameters x" in rec["reason"] and "GB free" in rec["reason"], rec["reason"]
