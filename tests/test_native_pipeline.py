"""Pipeline parallelism of torchtitan's native models (`nbs/native/11_pipeline.ipynb`, whose own test runs Qwen3 under
PP alone with the controls): DeepSeek-V3, the family that balances its experts, under PP+FSDP+EP (world 4) on its
built-in checkpoint. Each family's whole record, both configurations with the controls, is
`reports/<model>/native_pipeline.json` (`scripts/native_parallel.py`); CI keeps one launch for time."""

from moe_bench.native.pipeline import native_pipeline


def test_deepseek_v3_counts_fail_then_the_prototype_passes():
    """As shipped, PP's metadata-inference forward adds to the routed-token counts of the first step only (gradients,
    loss and weights within the bound); under the counts prototype it PASSes. The export gathered from the stages
    (FSDP and EP shards, the correction bias) gives back the checkpoint exactly, and its two mutations are caught."""
    rec = native_pipeline("deepseek_v3", configs=("PP+FSDP+EP",), controls=False)
    assert rec["status"] == "FAIL" and rec["prototype"]["status"] == "PASS", rec["prototype"]
    (row,) = rec["configs"]
    first, second = row["steps"]
    assert not first["balance"]["counts_equal"] and second["ok"]
    assert not first["params_failed"] and first["weights"]["ok"] and first["loss_abs_diff"] <= first["loss_tol"]
    assert [r["status"] for r in rec["prototype"]["configs"]] == ["PASS"]
    assert [(e["gather"], e["status"], e.get("caught")) for e in row["export"]] == [
        ("stages merged", "PASS", None),
        ("a stage left out", "FAIL", True),
        ("layers numbered per stage", "FAIL", True),
    ]
    assert rec["hf_loss"]["ok"] and rec["auxiliary_loss"]["lines"] == []
