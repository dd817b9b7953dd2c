"""Every nbdev notebook runs top to bottom with its own tests (in-process, as `nbdev_test` runs them)."""

import nbdev.test as nbt
import pytest

from conftest import REPO

NBS = REPO / "nbs"
NOTEBOOKS = sorted(p.relative_to(NBS).as_posix() for p in NBS.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def test_every_notebook_is_collected():
    assert {"00_core.ipynb", "01_probe.ipynb", "02_config.ipynb", "03_equivalence.ipynb"} <= set(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook(name, monkeypatch):
    monkeypatch.chdir((NBS / name).parent)  # as nbdev_test runs it: from the notebook's own folder
    ok, _ = nbt.test_nb(NBS / name, skip_flags=["notest", "slow"], basepath=REPO)
    assert ok, f"{name} failed; run `nbdev_test --path nbs/{name}` to see the cell"
