"""Every nbdev notebook runs top to bottom with its own tests (in-process, as `nbdev_test` runs them)."""

import nbdev.test as nbt
import pytest

from conftest import REPO

NOTEBOOKS = sorted(p.name for p in (REPO / "nbs").glob("*.ipynb"))


def test_every_notebook_is_collected():
    assert {"00_core.ipynb", "01_probe.ipynb", "02_config.ipynb", "03_equivalence.ipynb"} <= set(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook(name, monkeypatch):
    monkeypatch.chdir(REPO / "nbs")
    ok, _ = nbt.test_nb(REPO / "nbs" / name, skip_flags=["notest", "slow"], basepath=REPO)
    assert ok, f"{name} failed; run `nbdev_test --path nbs/{name}` to see the cell"
