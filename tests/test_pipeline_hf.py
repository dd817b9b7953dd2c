"""Pipeline parallelism in phase 4 (`nbs/04h_pipeline.ipynb`, whose own test runs Qwen3-MoE in one launch): a model
that cannot split says why, without a launch."""

from moe_bench.parallel_worker import make_batch, parallel_test_model
from moe_bench.pipeline_hf import cannot_split, layer_streams


def test_a_tied_model_cannot_split_and_says_why():
    "lfm2_moe ties its LM head to its embeddings: the first stage's tensor would be the last's."
    base, cfg, _ = parallel_test_model("lfm2_moe")
    ids, _ = make_batch(cfg)
    assert cannot_split(base, layer_streams(base, ids, {})).startswith("tied embeddings")
