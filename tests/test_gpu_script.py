"""scripts/gpu_parallelism.sh on a machine where no CUDA device is visible: one clear line, nothing run, exit 0."""

import os
import subprocess

from conftest import REPO


def test_gpu_script_without_gpus_says_so_and_exits_0(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    run = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_parallelism.sh"), "--out", str(tmp_path), "qwen3_moe"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines() == [
        "gpu_parallelism: no CUDA device on this machine, nothing run; phase 4's tested path is CPU/gloo: "
        "moe-bench run MODEL --phases 4"
    ], run.stdout
    assert not any(tmp_path.iterdir())  # no record: nothing ran
