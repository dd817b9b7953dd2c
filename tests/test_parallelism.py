"""Phase 4 on DeepSeek-V3 (MLA attention, group routing, shared experts, a dense first layer): every configuration
matches one process, and the wrong plans are caught. qwen3_moe's phase 4 runs in test_runs (moe-bench run)."""
from moe_bench.parallelism import CONFIG_NAMES, parallelism_phase


def test_deepseek_v3_parallel_parity():
    rec = parallelism_phase("deepseek_v3")
    assert rec["status"] == "PASS", rec.get("error") or rec.get("output_tail") or [(c["name"], c["error"]) for c in rec["configs"]]
    assert rec["backend"] == "gloo" and rec["world_size"] == 4 and rec["plan_attention"] == "local_map"
    configs = {c["name"]: c for c in rec["configs"]}
    assert tuple(configs) == CONFIG_NAMES
    assert configs["TP"]["mesh"]["tp"] == 4 and configs["FSDP+EP"]["mesh"]["ep"] == 4
    for c in configs.values():
        assert c["loss"] == [s["loss"] for s in c["steps"]] and len(c["loss"]) == 2
        tracked = c["steps"][0]["tracked"]
        assert set(tracked) == {"router", "expert w1", "attention q", "embeddings"} and all(t["ok"] for t in tracked.values())
    controls = {c["expected"]: c for c in rec["negative_controls"]}
    assert controls["setup check"]["caught"] and "post_attention_layernorm.weight" in controls["setup check"]["error"]
    assert controls["parity check"]["caught"] and controls["parity check"]["status"] == "FAIL"


def test_blocked_model_is_recorded_without_a_launch():
    rec = parallelism_phase("gpt_oss")
    assert rec["status"] == "BLOCKED" and "phase 1 did not pass" in rec["reason"]
