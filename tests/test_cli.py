"""Bad command lines: each is answered with one clear line on stderr and exit status 2, before any phase runs, and no
Python traceback. The kernel's TCP notice stays out of a run's output."""

import json
import subprocess
import sys

import pytest

from moe_bench.runner import KERNEL_ARGS, TCP_NOTICE, main
from moe_bench.trained import TRAINED


def _malformed_config(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text('{"model_type": "qwen3_moe",')
    return ["run", str(tmp_path / "ckpt")]


def _unknown_model_type(tmp_path):
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text('{"model_type": "no_such_model_type"}')
    return ["run", str(tmp_path / "odd")]


def _folder_without_config(tmp_path):
    (tmp_path / "empty").mkdir()
    return ["run", str(tmp_path / "empty")]


UNTRAINED = "olmoe"  # a known model type without a built-in trained checkpoint
BAD = {  # case: (argv, or a function of tmp_path giving it; what the one line must say)
    "malformed config.json": (_malformed_config, "not valid JSON"),
    "config.json of no known model type": (_unknown_model_type, "no config can be built from it"),
    "folder without config.json": (_folder_without_config, "without config.json"),
    "hub id with no cached snapshot": (["run", "Qwen/Qwen3-30B-A3B"], "run `hf download Qwen/Qwen3-30B-A3B`"),
    "URL": (["run", "https://example.invalid/Qwen3-30B-A3B"], "is a URL: no hub is reachable here"),
    "backwards range": (["run", "qwen3_moe", "--phases", "3-1"], "empty range '3-1'"),
    "unknown phase": (["run", "qwen3_moe", "--phases", "5"], "unknown phase '5'"),
    "3b with nothing to run on": (["run", UNTRAINED, "--phases", "3b"], "nothing to run on"),
    "unknown model": (["run", "qwen9_moe"], "unknown model 'qwen9_moe'"),
    "no model": (["run"], "name a model"),
    "a model and --all": (["run", "qwen3_moe", "--all"], "not both"),
    "--all with a backwards range": (["run", "--all", "--phases", "4-1"], "empty range"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_command_line(case, tmp_path, reports_tmp, capsys):
    argv, says = BAD[case]
    argv = argv(tmp_path) if callable(argv) else argv
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == [err.strip()] and err.startswith("moe-bench: ") and says in err, err
    assert out == "" and not reports_tmp.exists()  # refused before any phase: nothing printed, nothing written


def test_untrained_example_has_no_checkpoint():
    assert UNTRAINED not in TRAINED


def test_the_console_script_answers_a_bad_config_in_one_line(tmp_path):
    "The installed command, as a person types it: exit 2, one line, no traceback."
    proc = subprocess.run(
        ["moe-bench", *_malformed_config(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "not valid JSON" in proc.stderr
    assert "Traceback" not in proc.stderr


RUN_TINY = """
import json, sys, nbformat, papermill
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
nbformat.write(nb, sys.argv[1])
papermill.execute_notebook(sys.argv[1], sys.argv[2], kernel_name="python3", progress_bar=False,
                           extra_arguments=json.loads(sys.argv[3]))
print(nbformat.read(sys.argv[2], as_version=4).cells[0].outputs[0].text.strip())
"""


@pytest.mark.parametrize("kernel_args", [KERNEL_ARGS, []], ids=["runner", "stock"])
def test_the_kernel_tcp_notice_is_dropped(kernel_args, tmp_path):
    "With the runner's kernel arguments the notice is gone and the notebook still runs; without them it shows (control)."
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            RUN_TINY,
            str(tmp_path / "in.ipynb"),
            str(tmp_path / "out.ipynb"),
            json.dumps(kernel_args),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("42"), proc.stderr
    assert (TCP_NOTICE in proc.stderr) == (not kernel_args), proc.stderr
