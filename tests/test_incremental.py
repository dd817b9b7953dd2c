"""Issue 31's acceptance on the command line: a batch killed with SIGKILL resumes where it stopped (every finished
record whole and kept, the rest computed), two processes never write one reports root at once (the second waits,
or refuses with --no-wait; a killed holder never blocks), and a record goes stale when its config changes."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from transformers import AutoConfig

from moe_bench.incremental import reports_lock
from moe_bench.runner import main

MODELS = ["qwen3_moe", "mixtral", "olmoe", "qwen2_moe"]
ENV = dict(os.environ, PYTHONWARNINGS="ignore")


def moe_bench(*args, **kw):
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; from moe_bench.runner import main; sys.exit(main(sys.argv[1:]))", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        **kw,
    )


def records(root: Path) -> dict[str, dict]:
    "Every visible record under the reports root, parsed (a half-written one fails here)."
    return {f"{p.parent.name}/{p.stem}": json.loads(p.read_text()) for p in root.glob("*/*.json")}


def test_a_killed_batch_resumes_where_it_stopped(tmp_path):
    args = ["run", "--all", "--models", ",".join(MODELS), "--phases", "1,2", "--out", str(tmp_path), "--no-progress"]
    first = moe_bench(*args, start_new_session=True)
    done = tmp_path / MODELS[0] / "config.json"
    deadline = time.time() + 240
    while not done.exists() and time.time() < deadline and first.poll() is None:
        time.sleep(0.02)
    os.killpg(first.pid, signal.SIGKILL)  # mid-batch: the first model finished, the others not all
    first.wait()
    assert done.exists(), first.stderr.read()[-2000:]
    before = records(tmp_path)  # every record on disk is whole
    assert len(before) < 2 * len(MODELS), sorted(before)  # the kill came before the end
    again = moe_bench(*args)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-2000:]
    after = records(tmp_path)
    assert sorted(after) == sorted(f"{m}/{p}" for m in MODELS for p in ("probe", "config"))
    for key, rec in before.items():  # finished before the kill: kept, not computed again
        assert rec.get("status") == "ERROR" or after[key]["time_utc"] == rec["time_utc"], key
    assert f"[all] {MODELS[0]}: probe PASS (current, kept), config PASS (current, kept)" in out, out
    assert all("inputs" in rec for rec in after.values())
    assert not list(tmp_path.glob("*.tmp")) and (tmp_path / "index.html").exists()


def test_one_writer_per_reports_root(tmp_path, capsys):
    with reports_lock(str(tmp_path)):  # this process writes the root
        assert main(["run", "qwen3_moe", "--phases", "2", "--out", str(tmp_path), "--no-wait"]) == 2
        assert f"in use by pid {os.getpid()}" in capsys.readouterr().err
        waiting = moe_bench("run", "qwen3_moe", "--phases", "2", "--out", str(tmp_path), "--no-progress")
        deadline, line = time.time() + 120, ""
        while "waiting for" not in line and time.time() < deadline and waiting.poll() is None:
            line = waiting.stderr.readline()
        assert "waiting for" in line and f"pid {os.getpid()}" in line, line
        assert not (tmp_path / "qwen3_moe" / "config.json").exists()  # nothing written while the root is held
    out, _ = waiting.communicate(timeout=300)  # released: the waiting run goes on
    assert waiting.returncode == 0, out
    assert json.loads((tmp_path / "qwen3_moe" / "config.json").read_text())["status"] == "PASS"


def test_a_changed_config_makes_the_record_stale(tmp_path, capsys):
    folder, out = tmp_path / "m", str(tmp_path / "reports")
    folder.mkdir()
    small = dict(num_hidden_layers=2, hidden_size=64, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
    AutoConfig.for_model(
        "qwen3_moe", **small, num_attention_heads=4, num_key_value_heads=2, vocab_size=128
    ).save_pretrained(folder)
    assert main(["run", str(folder), "--phases", "2", "--out", out, "--no-progress"]) in (0, 1)
    capsys.readouterr()
    assert main(["run", str(folder), "--phases", "2", "--out", out, "--dry-run"]) == 0
    assert "keep: current" in capsys.readouterr().out
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(cfg | {"num_experts_per_tok": 1}))
    assert main(["run", str(folder), "--phases", "2", "--out", out, "--dry-run"]) == 0
    assert "run: config changed" in capsys.readouterr().out
