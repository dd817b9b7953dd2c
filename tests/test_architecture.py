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
    {"prototypes.common"},  # kernels and helpers several prototypes (and the extensions) share
    {"extensions", "expression"},
    {  # the prototypes: each one core change, on the descriptor `Expression` and the common kernels
        "prototypes.logit_bias",
        "prototypes.clamped_glu",
        "prototypes.non_gated",
        "prototypes.output_norm",
        "prototypes.expert_projections",
        "prototypes.score_before_experts",
        "prototypes.output_bias",
        "prototypes.route_norm_p",
        "prototypes.identity_experts",
        "prototypes.router_weighted_shared",
        "prototypes.router_mlp",
        "prototypes.per_modality",
        "prototypes.padded_experts",
        "prototypes.sparsemixer",
        "prototypes.layer_moe",
    },
    {"prototypes.softcapped_glu", "prototypes.score_func"},  # on the clamped GLU's experts and expression
    {"prototypes.hash_routing"},  # deepseek_v4's hash layers: the score-function prototype's router
    {"prototypes"},  # the index: `EXPRESSIONS`, `expression_of`, `swap_titan_moe`
    {"synth", "cpu_compat", "exact"},
    {"compare", "traces", "trained", "sharding.plan"},  # sharding: a package by concern, its index on top
    {"sharding.per_token", "sharding.indexers", "sharding.check", "sharding.styles"},
    {"sharding.attention"},
    {"sharding.mixers"},
    {"sharding.rules"},
    {"sharding.apply"},
    {"sharding"},  # the index re-exports its modules' API
    {"worker_controls"},  # the wrong plans phase 4's worker runs, from the plan language
    {"alignment", "parallel_worker", "native.family"},
    {"native.qwen3", "native.deepseek_v3", "native.gpt_oss", "native.load"},  # native: one module per family, and CPU
    {"native.mapping"},  # the table NATIVE, one row per family
    {"native.compare"},
    {"native.controls"},
    {"probe", "config", "equivalence", "gap", "pretrained", "parallelism", "native.phase"},  # the phases
    {"native"},  # the native package's index, which re-exports its modules' names (the runner imports the phase here)
    {"report_pages"},  # the HTML pages of every record, for the index and the runner
    {"coverage", "compat_doc"},
    {"runner"},
]
FLOOR = {m: i for i, floor in enumerate(FLOORS) for m in floor}
LIB = REPO / "moe_bench"
MAX_MODULE_LINES = 900  # a room past this holds more than one concern: make it a package by concern (STYLE.md)


def module_name(path) -> str:
    "Dotted name of a module file under moe_bench/ (`prototypes/__init__.py` is the package `prototypes`)."
    parts = list(path.relative_to(LIB).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(
    module_name(p)
    for p in LIB.rglob("*.py")
    if not p.stem.startswith("_") or (p.stem == "__init__" and p.parent != LIB)
)


def source_path(module: str):
    path = LIB.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _known(dotted: str) -> str:
    "The longest module of moe_bench that `dotted` (a name under moe_bench) names or lies in."
    parts = dotted.split(".")
    while parts and ".".join(parts) not in FLOOR:
        parts.pop()
    return ".".join(parts) or dotted


def imports_of(module: str, source: str | None = None) -> set[str]:
    "moe_bench modules `module` imports anywhere in its source (top level or inside a function)."
    path = source_path(module)
    tree = ast.parse(source if source is not None else path.read_text())
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                names = (
                    [".".join(base + [node.module])] if node.module else [".".join(base + [a.name]) for a in node.names]
                )
            elif (node.module or "").startswith("moe_bench"):
                rest = node.module.split(".")[1:]
                names = [".".join(rest)] if rest else [a.name for a in node.names]
            else:
                continue
            out |= {_known(n) for n in names if n}
        elif isinstance(node, ast.Import):
            out |= {_known(a.name.split(".", 1)[1]) for a in node.names if a.name.startswith("moe_bench.")}
    return out - {module}


def test_every_module_has_a_floor():
    assert set(MODULES) == set(FLOOR), (set(MODULES) - set(FLOOR), set(FLOOR) - set(MODULES))


def upward_imports(module: str, source: str | None = None) -> list[str]:
    return sorted(m for m in imports_of(module, source) if FLOOR.get(m, len(FLOORS)) >= FLOOR[module])


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


@pytest.mark.parametrize("module", MODULES)
def test_no_module_holds_more_than_one_room(module):
    "No module of moe_bench/ (the generated `_modidx.py` aside) passes MAX_MODULE_LINES lines."
    lines = len(source_path(module).read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{module}: {lines} lines; split it by concern"


def test_the_size_check_reads_the_files():
    "Negative control: the check measures real files (the largest module is not empty) and sees a package's index."
    assert max(len(source_path(m).read_text().splitlines()) for m in MODULES) > 100
    assert module_name(LIB / "pkg" / "__init__.py") == "pkg" and module_name(LIB / "pkg" / "a.py") == "pkg.a"


def test_the_check_reads_a_package_modules_imports():
    "Negative control: two dots from a package module climb to moe_bench; `from . import x` is a sibling."
    found = imports_of("pkg.a", "from ..probe import probe_model\nfrom . import b\nimport moe_bench.core")
    assert {"probe", "core"} <= found and "pkg.b" in found


MAX_EXPORT_CELL_LINES = 60  # one function or one small class per export cell, then its prose and its test (STYLE.md)
PACKAGE_NOTEBOOKS = sorted(
    p.relative_to(REPO / "nbs").as_posix()
    for p in (REPO / "nbs").glob("*/*.ipynb")
    if ".ipynb_checkpoints" not in p.parts
)


def long_export_cells(cells: list[dict]) -> list[tuple[int, int]]:
    "(index, lines) of each export cell over MAX_EXPORT_CELL_LINES lines."
    out = []
    for i, cell in enumerate(cells):
        text = "".join(cell["source"])
        if cell["cell_type"] == "code" and text.startswith(("#| export", "#| exporti")):
            if (n := len(text.splitlines())) > MAX_EXPORT_CELL_LINES:
                out.append((i, n))
    return out


@pytest.mark.parametrize("notebook", PACKAGE_NOTEBOOKS)
def test_package_notebooks_keep_export_cells_short(notebook):
    "The notebooks of the packages (prototypes, sharding, native) hold no export cell over MAX_EXPORT_CELL_LINES lines."
    import json

    cells = json.loads((REPO / "nbs" / notebook).read_text())["cells"]
    assert not long_export_cells(cells), f"{notebook}: export cells (index, lines) {long_export_cells(cells)}"


def test_the_cell_check_sees_a_long_cell():
    "Negative control: a 61-line export cell is reported, a 61-line test cell and a 60-line export cell are not."
    long_cell = dict(cell_type="code", source=["#| export\n"] + ["x = 1\n"] * 60)
    short = dict(cell_type="code", source=["#| export\n"] + ["x = 1\n"] * 59)
    test = dict(cell_type="code", source=["x = 1\n"] * 61)
    assert long_export_cells([short, long_cell, test]) == [(1, 61)]
