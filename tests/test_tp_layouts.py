"""The head-aware TP layouts of `04b_sharding`, each under TP at world size 2 and 4 against one process (every
gradient, both steps), and the wrong layout of each caught: `gathered_norm` (olmoe's q/k norms over the whole
projection), `head_sharded` (openai_privacy_filter's attention sinks), output gates column-wise on the heads
(laguna's `g_proj`), and the linear-attention mixers: qwen3_next's gated deltanet (its depthwise conv over cat(q, k, v)
`blockwise`, its per-head gated norm `replicate(mode=local_rows)`), bailing_hybrid's conv `blockwise` at TP 4 (its
heads allow it; qwen3_next's two key heads stop at TP 2) and kimi_linear's forget gate `head_sharded` (its A_log on
dim 2, its low-rank projection replicated), minimax's lightning attention `head_sharded` with its decay buffers (the
rank's heads' rows), dbrx's fused [q; k; v] `Wqkv` `blockwise` on its three sections, and the DSA indexers:
deepseek_v32's (`dtensor_region`: per index head up to the sum over heads, which DTensor all-reduces before the
top-k) and mistral_large4's per-head softmax scaling (`head_sharded(mode=dtensor)`), each caught when sharded with the
GQA recipe (each rank's top-k over its own heads), and jamba's Mamba1 mixer sharded on its inner channels, its
`x_proj` `rowwise_replicated` (caught when each rank's share of the gradient of dt, B and C is taken for the whole),
and the Mamba2 mixers: nemotron_h's (eight groups: B and C split with their heads; `in_proj` `blockwise` in its five
sections) and granitemoehybrid's (one group: B and C whole on every rank, the gated norm over the group
`gathered_norm(mode=gated)`, caught when run on each rank's heads), and ernie4_5_vl_moe's per-modality MoE (its
modality MoE, a second torchtitan MoE inside the first, sharded as the first, on a mixed modality mask; caught when
its experts are left whole on every rank). One torchrun launch per world size, the TP configuration alone, on the
small models."""

import json

import pytest

from moe_bench.parallelism import launch_worker

# (model, the layout kind it exercises, how its plan names it, the wrong layout's control and what must catch it)
CASES = [
    ("olmoe", "gathered_norm", "q_norm", "wrong reduction: q_norm over each rank's shard", "parity check"),
    (
        "openai_privacy_filter",
        "head_sharded",
        "self_attn",
        "wrong layout: the attention's per-head state",
        "runtime error",
    ),
    ("laguna", "colwise", "g_proj", "wrong layout: the output gate g_proj", "setup check"),
    ("qwen3_next", "blockwise", "conv1d", "wrong layout: conv1d contiguously Shard(0)", "parity check"),
    ("qwen3_next", "replicate", "norm", "wrong reduction: the per-head norm a plain replicated", "parity check"),
    ("bailing_hybrid", "blockwise", "conv1d", "wrong layout: conv1d contiguously Shard(0)", "parity check"),
    ("kimi_linear", "head_sharded", "forget_gate", "wrong layout: the attention's per-head state", "runtime error"),
    ("minimax", "head_sharded", "self_attn", "wrong layout: the attention's per-head state", "runtime error"),
    ("dbrx", "blockwise", "Wqkv", "wrong layout: Wqkv contiguously Shard(0)", "parity check"),
    (
        "deepseek_v32",
        "dtensor_region",
        "indexer",
        "wrong reduction: the indexer's top-k over each rank's own",
        "parity check",
    ),
    ("jamba", "rowwise_replicated", "x_proj", "wrong reduction: x_proj's output gradient", "parity check"),
    ("nemotron_h", "blockwise", "in_proj", "wrong layout: in_proj contiguously Shard(0)", "parity check"),
    (
        "granitemoehybrid",
        "gathered_norm",
        "norm",
        "wrong reduction: the gated norm over each rank's heads",
        "parity check",
    ),
    (
        "mistral_large4",
        "head_sharded",
        "softmax_scaling",
        "wrong reduction: the indexer's top-k over each rank's own",
        "parity check",
    ),
    ("ernie4_5_vl_moe", "titan_moe", "modality_moe", "wrong layout: the modality_moe's experts", "parity check"),
]
MODELS = list(dict.fromkeys(c[0] for c in CASES))  # one launch runs each model once, in this order on every rank


@pytest.fixture(scope="module", params=[2, 4], ids=lambda ws: f"ws{ws}")
def launch(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"tp_ws{request.param}")
    rc, tail, _ = launch_worker(MODELS, str(out), nproc=request.param, configs=("TP",))
    assert rc == 0, tail
    return request.param, {m: json.load(open(out / f"{m}.json")) for m in MODELS}


@pytest.mark.parametrize("model, kind, module, control, catcher", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_layout_parity_and_its_wrong_layout(launch, model, kind, module, control, catcher):
    world, results = launch
    res = results[model]
    assert "error" not in res, res.get("traceback")
    assert any(e["module"].endswith("." + module) and e["spec"].split("(")[0] == kind for e in res["plan"])
    (tp,) = res["configs"]
    assert (res["world_size"], tp["name"]) == (world, "TP") and tp["mesh"]["tp"] >= 2
    assert tp["status"] == "PASS", tp.get("error")
    assert len(tp["steps"]) == 2 and all(s["ok"] and not s["params_failed"] for s in tp["steps"])
    wrong = [c for c in res["negative_controls"] if c["name"].startswith(control)]
    assert len(wrong) == 1, [c["name"] for c in res["negative_controls"]]
    assert wrong[0]["caught"] and wrong[0]["caught_by"] == catcher, (wrong[0]["status"], wrong[0].get("error"))
