"""Phase 4 on torchtitan's own trainer (issue 41): the workflow's command under torchrun, judged against HF's model
and one process, with its controls. One launch of four configurations on the patched backend, about a minute."""

import json
from pathlib import Path

import pytest

from moe_bench.backend import trainer_phase
from moe_bench.backend.patches import ALL_PATCHES, TRAINER_PATCHES
from moe_bench.backend.source import folder_digest, installed_backend
from moe_bench.backend.trainer_phase import (
    CAUSES,
    diagnose,
    launch_configs,
    launch_type,
    rank_tails,
    run_launch,
    types_share,
    write_folder,
)
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


def test_a_launch_whose_records_stop_coming_is_stopped_long_before_its_bound(tmp_path, monkeypatch):
    "The stall bound: no record in the start's allowance plus one configuration's share, and the launch is killed whole."
    import subprocess

    monkeypatch.setattr(trainer_phase, "LAUNCH_START_S", 1)
    monkeypatch.setattr(trainer_phase, "LAUNCH_PER_CONFIG_S", 2)
    marker = str(tmp_path / "stalls.json")
    out = tmp_path / "out.jsonl"  # never written: the worker fails to read its configurations long after 3 s
    run = run_launch(["--configs", marker, "--out", str(out), "--"], timeout_s=600, progress=out)
    assert run["timed_out"] and run["stalled"] and run["wall_s"] < 30, run
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split() == []


ROOT_CAUSE = """Root Cause (first observed failure):
[0]:
  time      : 2026-12-07_03:36:08
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -11 (pid: 8635)  (SIGSEGV)
  error_file: <N/A>
  traceback : Signal 11 (SIGSEGV) received by PID 8635"""  # Beam's FSDP+TP+EP launch, as torchrun printed it
PEER = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:24237"


def _fake_launches(monkeypatch, first: list[dict]) -> list[list[str]]:
    "torchrun replaced: the first launch writes `first` and ends with a rank segfaulted, a later one passes its configs."
    launched = []

    def fake(args, timeout_s, nproc=4, progress=None):
        names = [c["name"] for c in json.loads(Path(args[args.index("--configs") + 1]).read_text())]
        out, crashed = Path(args[args.index("--out") + 1]), not launched
        lines = first if crashed else [dict(name=n, status="PASS") for n in names]
        out.write_text("".join(json.dumps(line) + "\n" for line in lines))
        launched.append(names)
        tail = f"...\n{ROOT_CAUSE}\n" if crashed else "done"
        return dict(exit_code=int(crashed), wall_s=10.0, timed_out=False, command="torchrun", output_tail=tail)

    monkeypatch.setattr(trainer_phase, "run_launch", fake)
    return launched


def test_a_rank_killed_by_a_signal_is_named_and_the_rest_run_in_a_fresh_launch(tmp_path, monkeypatch):
    confs = [dict(name=n, args=[]) for n in ("FSDP+TP+EP", "TP", "PP")]
    launched = _fake_launches(monkeypatch, [dict(name="FSDP+TP+EP", status="FAIL", stage="train", error=PEER)])
    run = launch_type(str(tmp_path), confs, patched=False)
    assert launched == [["FSDP+TP+EP", "TP", "PP"], ["TP", "PP"]]  # the configurations the crash stopped, again
    by_name = {c["name"]: c for c in run["configs"]}
    crashed = by_name["FSDP+TP+EP"]
    assert crashed["error"] == "rank 1: killed by SIGSEGV (exit code -11), no Python error"
    assert crashed["rank0_error"] == PEER and crashed["root_cause"]["cause"].startswith("a rank's process was killed")
    assert by_name["TP"]["status"] == by_name["PP"]["status"] == "PASS"
    assert run["relaunched_after_crash"]["configs"] == ["TP", "PP"] and run["wall_s"] == 20.0


def test_a_crash_before_any_record_is_not_relaunched(tmp_path, monkeypatch):
    "No configuration got a record: a fresh launch would crash the same way, so each says how the launch ended."
    launched = _fake_launches(monkeypatch, [])
    run = launch_type(str(tmp_path), [dict(name="FSDP", args=[])], patched=False)
    assert len(launched) == 1 and "relaunched_after_crash" not in run
    assert run["configs"][0]["status"] == "ERROR" and "the launch ended (exit 1)" in run["configs"][0]["error"]


def test_a_stalled_configuration_runs_once_more_then_is_its_own_record_and_the_rest_run_again(tmp_path, monkeypatch):
    "A launch stopped on a stall: the configuration it was running once more at the head of a fresh launch (a wait on a"
    " peer an earlier one left behind stalls only there); stalled again, it says so, and the ones after it run."
    launched = []

    def fake(args, timeout_s, nproc=4, progress=None):
        confs = json.loads(Path(args[args.index("--configs") + 1]).read_text())
        keys = [(c["model"], c["name"]) for c in confs]
        stalls = ("a", "TP") in keys  # a's TP stalls wherever it runs
        upto = keys.index(("a", "TP")) if stalls else None
        lines = [dict(model=m, name=n, status="PASS") for m, n in keys[:upto]]
        progress.write_text("".join(json.dumps(line) + "\n" for line in lines))
        launched.append(keys)
        return dict(exit_code=124 if stalls else 0, wall_s=12.0, timed_out=stalls, stalled=stalls, command="torchrun",
                    output_tail="")  # fmt: skip

    monkeypatch.setattr(trainer_phase, "run_launch", fake)
    confs = [dict(model=m, name=n, args=[], titan=["--hf_model", m]) for m in ("a", "b") for n in ("FSDP", "TP")]
    run = launch_configs(confs, patched=False)
    assert launched[1:] == [[("a", "TP"), ("b", "FSDP"), ("b", "TP")], [("b", "FSDP"), ("b", "TP")]]
    got = {(c["model"], c["name"]): c for c in run["configs"]}
    assert got[("a", "TP")]["status"] == "ERROR" and "stalled" in got[("a", "TP")]["error"]
    assert got[("a", "FSDP")]["status"] == got[("b", "FSDP")]["status"] == got[("b", "TP")]["status"] == "PASS"
    assert run["relaunched_after_stall"]["relaunched_after_stall"]["configs"] == ["b FSDP", "b TP"]
    assert run["wall_s"] == 36.0


def test_a_configuration_whose_ranks_failed_unevenly_ends_the_launch_and_the_rest_run_in_a_fresh_one(
    tmp_path, monkeypatch
):
    "The worker ended the launch after a's FSDP+TP+EP (its ranks raised different errors): that record says why, and"
    " b's configurations run in processes whose gloo pairs hold nothing of it."
    launched = []
    why = "its ranks ended it differently: rank 0: ok; rank 1: build: ValueError: x at f.py:1 in g"

    def fake(args, timeout_s, nproc=4, progress=None):
        confs = json.loads(Path(args[args.index("--configs") + 1]).read_text())
        keys = [(c["model"], c["name"]) for c in confs]
        upto = keys.index(("a", "FSDP+TP+EP")) + 1 if ("a", "FSDP+TP+EP") in keys else None
        lines = [dict(model=m, name=n, status="PASS") for m, n in keys[:upto]]
        progress.write_text("".join(json.dumps(line) + "\n" for line in lines))
        if upto is not None:
            Path(f"{progress}.ended").write_text(json.dumps(dict(model="a", name="FSDP+TP+EP", why=why)))
        launched.append(keys)
        return dict(exit_code=0, wall_s=10.0, timed_out=False, command="torchrun", output_tail="done")

    monkeypatch.setattr(trainer_phase, "run_launch", fake)
    confs = [dict(model=m, name=n, args=[], titan=[]) for m, names in (("a", ("FSDP+TP+EP",)), ("b", ("FSDP", "TP")))
             for n in names]  # fmt: skip
    run = launch_configs(confs, patched=False)
    assert launched == [[("a", "FSDP+TP+EP"), ("b", "FSDP"), ("b", "TP")], [("b", "FSDP"), ("b", "TP")]]
    got = {(c["model"], c["name"]): c for c in run["configs"]}
    assert got[("a", "FSDP+TP+EP")]["ranks_uneven"] == why and "ranks_uneven" not in got[("b", "FSDP")]
    assert all(c["status"] == "PASS" for c in got.values()) and len(got) == 3
    assert run["relaunched_after_uneven"]["configs"] == ["b FSDP", "b TP"] and run["wall_s"] == 20.0


def test_a_shared_launch_as_each_type_holds_it():
    "Each type keeps its own configurations and its part of the launch's start; whose configurations are whose is kept."
    launch = dict(
        wall_s=30.0, configs=[dict(model="a", name="FSDP", wall_s=4.0), dict(model="b", name="FSDP", wall_s=6.0)]
    )
    a = types_share(launch, "a", ["a", "b"])
    assert [c["name"] for c in a["configs"]] == ["FSDP"] and "model" not in a["configs"][0]
    assert a["wall_s"] == 4.0 + 20.0 / 2 and a["launch_wall_s"] == 30.0 and a["shared_with"] == ["a", "b"]


ABORT = ROOT_CAUSE.replace("rank      : 1", "rank      : 0").replace("-11", "-6").replace("SIGSEGV", "SIGABRT")
OWN = "AttributeError: 'NoneType' object has no attribute 'modules'"  # dots3_note's PP on rank 2, in a shared launch


def test_a_rank_0_abort_runs_its_configuration_once_more_then_reads_it_from_the_other_ranks(tmp_path, monkeypatch):
    "Rank 0 aborted inside a configuration (no record of it): once more at the head of a fresh launch (gloo's aborts"
    " can be flakes), then its record from the rank that raised its own error; the configurations after it run."
    launched = []

    def fake(args, timeout_s, nproc=4, progress=None):
        confs = json.loads(Path(args[args.index("--configs") + 1]).read_text())
        launched.append([f"{c['model']} {c['name']}" for c in confs])
        lines = [dict(model=c["model"], name=c["name"], status="PASS") for c in confs if c["name"] != "PP"]
        aborts = confs[0]["name"] == "PP" or len(confs) > 2
        lines = lines[:1] if aborts and len(confs) > 2 else [] if aborts else lines
        progress.write_text("".join(json.dumps(line) + "\n" for line in lines))
        if aborts:
            own = dict(model="a", name="PP", stage="build", error=OWN, raised_at="hf_sharding.py:364 in f")
            Path(f"{progress}.rank2").write_text(json.dumps(own) + "\n")
        return dict(exit_code=int(aborts), wall_s=5.0, timed_out=False, command="torchrun",
                    output_tail=f"...\n{ABORT}\n" if aborts else "done")  # fmt: skip

    monkeypatch.setattr(trainer_phase, "run_launch", fake)
    confs = [dict(model="a", name="FSDP", args=[], titan=[]), dict(model="a", name="PP", args=[], titan=[])]
    run = launch_configs(confs + [dict(model="b", name="FSDP", args=[], titan=[])], patched=False)
    assert launched == [["a FSDP", "a PP", "b FSDP"], ["a PP", "b FSDP"], ["b FSDP"]]
    got = {f"{c['model']} {c['name']}": c for c in run["configs"]}
    assert got["a PP"]["status"] == "FAIL" and got["a PP"]["error"] == f"rank 2: {OWN}", got["a PP"]
    assert got["a FSDP"]["status"] == got["b FSDP"]["status"] == "PASS"
    assert run["relaunched_after_abort"]["relaunched_after_crash"]["configs"] == ["b FSDP"]
