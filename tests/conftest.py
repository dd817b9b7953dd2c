"""Shared test setup: every test writes reports into a temporary root, never into the committed reports/."""

from pathlib import Path

import pytest

SPREAD = {"test_notebooks"}  # modules whose tests share nothing: each test on whichever worker is free
# the modules with the longest runs (torchrun launches, the main job, fresh processes), handed out first so that the
# short ones fill the workers' ends
FIRST = ("test_tp_layouts", "test_runs", "test_parallelism", "test_backend", "test_pretrained", "test_native_pipeline")


def pytest_collection_modifyitems(items):
    "Under `-n 2 --dist loadgroup` each test module runs whole on one worker (its module-scoped fixtures, a patched"
    " backend's fresh process or a torchrun launch, built once; its tests in order), but for the `SPREAD` ones."
    for item in items:
        module = item.module.__name__
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid if module in SPREAD else module))
    rank = {m: i for i, m in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.module.__name__, len(FIRST)))  # stable: each module keeps its order


REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def reports_tmp(tmp_path, monkeypatch):
    "Point $MOE_BENCH_REPORTS at a fresh folder for each test."
    root = tmp_path / "reports"
    monkeypatch.setenv("MOE_BENCH_REPORTS", str(root))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf_cache"))  # a subprocess's Hugging Face cache: empty
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root
