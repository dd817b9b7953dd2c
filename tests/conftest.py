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
