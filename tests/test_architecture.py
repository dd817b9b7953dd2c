"""The library's shape: every module sits on a floor, imports only from floors below it (so there is no import circle),
and the phase modules use the backends, never each other."""

import ast

import pytest

from conftest import REPO

# Lowest first. A module may import only from strictly lower floors: backends below phases, phases below the
# batch (coverage) and the runner. Two modules on one floor never import each other.
FLOORS = [
    {"core"},
    {"hf"},
    {"moe_probe", "checkpoint"},
    {"adapter"},
    {"replacement"},
    {"extensions"},
    {"expression", "synth", "cpu_compat", "exact"},
    {"compare", "traces", "sharding", "trained"},
    {"alignment", "parallel_worker"},
    {"probe", "config", "equivalence", "gap", "pretrained", "parallelism", "native"},  # the phases
    {"report_pages"},  # the HTML pages of every record, for the index and the runner
    {"coverage", "compat_doc"},
    {"runner"},
]
FLOOR = {m: i for i, floor in enumerate(FLOORS) for m in floor}
MODULES = sorted(p.stem for p in (REPO / "moe_bench").glob("*.py") if not p.stem.startswith("_"))


def imports_of(module: str, source: str | None = None) -> set[str]:
    "moe_bench modules `module` imports anywhere in its source (top level or inside a function)."
    tree = ast.parse(source if source is not None else (REPO / "moe_bench" / f"{module}.py").read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                out.add((node.module or "").split(".")[0] or next(a.name for a in node.names))
            elif (node.module or "").startswith("moe_bench"):
                out.add(node.module.split(".")[1] if "." in node.module else next(a.name for a in node.names))
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("moe_bench.")}
    return out - {module}


def test_every_module_has_a_floor():
    assert set(MODULES) == set(FLOOR), (set(MODULES) - set(FLOOR), set(FLOOR) - set(MODULES))


def upward_imports(module: str, source: str | None = None) -> list[str]:
    return sorted(m for m in imports_of(module, source) if FLOOR[m] >= FLOOR[module])


@pytest.mark.parametrize("module", MODULES)
def test_imports_only_from_lower_floors(module):
    assert not upward_imports(module), f"{module} (floor {FLOOR[module]}) imports {upward_imports(module)}"


@pytest.mark.parametrize(
    "source",
    [
        "from .probe import probe_model",
        "from moe_bench.probe import probe_model",
        "def f():\n    from moe_bench import probe\n",
        "import moe_bench.probe",
    ],
)
def test_the_check_sees_an_upward_import(source):
    "Negative control: a phase importing a phase, in any spelling, even inside a function, is reported."
    assert upward_imports("equivalence", source) == ["probe"]
