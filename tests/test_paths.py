"""Paths as users type them (issue 42): `--out`, `--checkpoint` and the variables `MOE_BENCH_REPORTS` and
`MOE_BENCH_CHECKPOINTS`, given relative from a working directory of the user's, name folders there, whichever way a
phase then runs (papermill runs every phase's notebook in `nbs/`, where a relative path names another folder)."""

import json
import os
from pathlib import Path

import pytest
from transformers import AutoConfig

import moe_bench.runner as runner
from moe_bench.core import REPO_ROOT
from moe_bench.trained import checkpoints_root

SMALL = dict(num_hidden_layers=2, hidden_size=64, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2)


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    "A working directory of the user's, outside the repository, holding a small Qwen3-MoE config folder `m`."
    work = tmp_path / "work"
    work.mkdir()
    AutoConfig.for_model(
        "qwen3_moe", **SMALL, num_attention_heads=4, num_key_value_heads=2, vocab_size=128
    ).save_pretrained(work / "m")
    monkeypatch.chdir(work)
    monkeypatch.delenv("MOE_BENCH_REPORTS", raising=False)
    monkeypatch.delenv("MOE_BENCH_CHECKPOINTS", raising=False)
    return Path.cwd()


def test_a_relative_out_is_the_users(elsewhere):
    "Phase 2 through papermill (its notebook runs in nbs/) writes its record under the user's relative `--out`."
    assert runner.main(["run", "m", "--phases", "2", "--out", "myreports", "--no-progress", "--no-wait"]) in (0, 1)
    record = elsewhere / "myreports" / "m" / "config.json"
    assert record.exists(), sorted(str(p) for p in elsewhere.rglob("*.json"))
    assert json.loads(record.read_text())["status"] in ("PASS", "WARN")
    assert not (REPO_ROOT / "nbs" / "myreports").exists()  # the bug: the record written inside the repository


def test_a_relative_reports_variable_is_the_users(elsewhere, monkeypatch):
    "`MOE_BENCH_REPORTS=myreports`: after the command line is read, a kernel started in nbs/ (inheriting the variable)"
    " and the runner itself both name the user's folder."
    monkeypatch.setenv("MOE_BENCH_REPORTS", "myreports")
    seen = {}
    monkeypatch.setattr(runner, "run_model", lambda *a: seen.update(root=runner.reports_root(a[2])) or [])
    assert runner.main(["run", "m", "--phases", "2", "--no-progress", "--no-wait"]) != 2  # not refused
    assert os.environ["MOE_BENCH_REPORTS"] == str(elsewhere / "myreports") and seen["root"] == elsewhere / "myreports"
    monkeypatch.chdir(runner.NBS_DIR)  # where papermill runs the notebooks
    assert runner.reports_root() == elsewhere / "myreports"


def test_a_relative_checkpoint_reaches_the_notebook_absolute(elsewhere, monkeypatch):
    "`--checkpoint ck` from the user's folder: the command line and the notebook's parameters name that folder."
    (elsewhere / "ck").mkdir()
    seen = {}
    monkeypatch.setattr(runner, "open_checkpoint", lambda folder: seen.setdefault("opened", folder))
    monkeypatch.setattr(runner, "run_model", lambda model, phases, out, progress, checkpoint, force: seen.update(
        checkpoint=checkpoint, out=out) or [])  # fmt: skip
    runner.main(["run", "qwen3_moe", "--checkpoint", "ck", "--out", "r", "--no-progress"])  # no phase ran: exit 1
    assert seen == dict(opened=str(elsewhere / "ck"), checkpoint=str(elsewhere / "ck"), out=str(elsewhere / "r"))
    params = {}

    def execute(notebook, output, parameters, cwd, **kw):  # what papermill would hand the notebook in nbs/
        params.update(parameters, cwd=cwd)

    monkeypatch.setattr(runner.papermill, "execute_notebook", execute)
    runner.run_notebook("qwen3_moe", "pretrained", runner.NBS_DIR / "03e_pretrained.ipynb", "r", checkpoint="ck")
    assert params["checkpoint"] == str(elsewhere / "ck") and params["out_dir"] == str(elsewhere / "r")
    assert params["cwd"] == str(runner.NBS_DIR)


def test_a_relative_checkpoints_variable_is_the_users(elsewhere, monkeypatch):
    "`MOE_BENCH_CHECKPOINTS=ck`: after the command line is read, a kernel started in nbs/ finds the user's folder."
    monkeypatch.setenv("MOE_BENCH_CHECKPOINTS", "ck")
    monkeypatch.setattr(runner, "run_model", lambda *a: [])
    assert runner.main(["run", "qwen3_moe", "--phases", "2", "--no-progress"]) != 2  # not refused
    assert os.environ["MOE_BENCH_CHECKPOINTS"] == str(elsewhere / "ck")
    monkeypatch.chdir(runner.NBS_DIR)  # where papermill runs the notebooks
    assert checkpoints_root() == elsewhere / "ck"
