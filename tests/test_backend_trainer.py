"""Phase 4 on torchtitan's own trainer (issue 41): the workflow's command under torchrun, judged against HF's model
and one process, with its controls. One launch of four configurations on the patched backend, about a minute."""

import pytest

from moe_bench.backend.patches import ALL_PATCHES, TRAINER_PATCHES
from moe_bench.backend.source import folder_digest, installed_backend
from moe_bench.backend.trainer_phase import CAUSES, diagnose, launch_type, rank_tails, run_launch, write_folder
from moe_bench.backend.trainer_worker import WORKFLOW_ARGS, configurations

GATE_CONTROL = "control: router gate negated after the load"
SHARDING_CONTROL = "control: a sharding config left out"


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    "qwen3_moe's folder (written by save_pretrained), FSDP, FSDP+EP and the two controls in one launch with the patches."
    folder = tmp_path_factory.mktemp("qwen3_moe")
    info = write_folder("qwen3_moe", folder)
    confs = {c["name"]: c for c in configurations(info["config"], info["experts"])}
    run_confs = [
        confs["FSDP"],
        confs["FSDP+EP"],
        dict(confs["FSDP"], name=GATE_CONTROL, control="router-gate-negated"),
        dict(confs["FSDP+TP+EP"], name=SHARDING_CONTROL, control="sharding-config-left-out"),
    ]
    before = folder_digest(installed_backend())
    run = launch_type(str(folder), run_confs, patched=True)
    assert folder_digest(installed_backend()) == before  # torchtitan on disk byte-identical
    return {c["name"]: c for c in run["configs"]}, run


def test_the_command_is_the_workflows_with_torchtitans_config_manager(launched):
    configs, run = launched
    assert run["exit_code"] == 0 and not run["timed_out"], run["output_tail"]
    assert " ".join(WORKFLOW_ARGS) in run["command"] and "--training.steps 2" in run["command"]
    assert "--checkpoint.initial_load_in_hf" in run["command"]
    assert {"FSDP", "FSDP+EP"} <= set(configs)


@pytest.mark.parametrize("name", ["FSDP", "FSDP+EP"])
def test_parity_with_hf_and_with_one_process(launched, name):
    c = launched[0][name]
    assert c["status"] == "PASS", (c.get("error"), c.get("root_cause"))
    assert c["hf"]["status"] == "PASS" and c["hf"]["logits_ratio"] <= c["hf"]["bound"], c["hf"]
    assert not c["loaded_differs"] and len(c["steps"]) == 2
    for step in c["steps"]:
        assert step["loss_ok"] and not step["params_failed"] and step["expert_bias_diff"] == 0, step
        assert step["params_compared"] >= 20  # every parameter, the experts and router included
        assert step["worst"]["keys"] == "hf" and not step["worst"]["param"].startswith("model.model.")  # HF's keys
    assert c["escalated"] and c["cpu_adaptations"]


def test_a_model_unlike_the_folder_fails_against_hf(launched):
    "The negative control: the run trains a gate that is not the folder's; HF's comparison and the load check say so."
    c = launched[0][GATE_CONTROL]
    assert c["status"] == "FAIL" and c["hf"]["status"] == "FAIL", c.get("hf")
    assert any(k.endswith("router.gate.weight") for k in c["loaded_differs"]), c["loaded_differs"]
    assert "loaded differ" in diagnose(c)["cause"]


def test_a_sharding_config_left_out_fails_at_setup_with_the_backstops_message(launched):
    c = launched[0][SHARDING_CONTROL]
    assert c["status"] == "FAIL" and c["stage"] == "build", c
    assert "Unsharded modules with no _sharding_config" in c["error"] and "o_proj" in c["error"], c["error"]
    assert c["root_cause"]["cause"].startswith("a module left without a sharding config")


def test_each_trainer_patch_is_a_root_cause_rows_fix():
    "Every patch the trainer phase proves removes a cause its table names (test_backend applies them all)."
    fixes = {row["fix"] for row in CAUSES}
    assert TRAINER_PATCHES and {p.path.stem for p in TRAINER_PATCHES} <= fixes
    assert all(p in ALL_PATCHES for p in TRAINER_PATCHES)


def test_a_launch_past_its_bound_is_killed_whole_with_each_ranks_tail(tmp_path):
    "A hung launch (here: one that cannot finish in three seconds) ends at its bound, torchrun and every rank with it."
    import subprocess

    marker = str(tmp_path / "never.json")
    run = run_launch(["--configs", marker, "--out", str(tmp_path / "out.jsonl"), "--"], timeout_s=3)
    assert run["timed_out"] and run["exit_code"] == 124 and run["wall_s"] < 30
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == [], left  # no rank survives its launch
    assert rank_tails("[default0]:a\n[default1]:b\n[default1]:c\nnot a rank line") == {"0": ["a"], "1": ["b", "c"]}
