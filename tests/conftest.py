"""Shared test setup: every test writes reports into a temporary root, never into the committed reports/."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def reports_tmp(tmp_path, monkeypatch):
    "Point $MOE_BENCH_REPORTS at a fresh folder for each test."
    root = tmp_path / "reports"
    monkeypatch.setenv("MOE_BENCH_REPORTS", str(root))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf_cache"))  # a subprocess's Hugging Face cache: empty
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


# Two workers share the suite (pytest-xdist, `-n 2 --dist loadgroup` in pyproject.toml). A test that uses a
# module-scoped fixture (a built model, a launch's records) runs on the worker that built it: its module is one group.
# The longest tests start first, so that neither worker is left with one of them at the end.
LONGEST_FIRST = ("test_runs.py::test_moe_bench_run_qwen3_moe", "test_parallelism.py::", "test_notebooks.py::")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        defs = fixtures.name2fixturedefs.values() if fixtures else ()
        if any(d[-1].scope == "module" for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    rank = lambda item: next((i for i, p in enumerate(LONGEST_FIRST) if p in item.nodeid), len(LONGEST_FIRST))  # noqa: E731
    items.sort(key=rank)
