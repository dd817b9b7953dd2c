"""The library's shape: every module sits on a floor, imports only from floors below it (so there is no import circle),
and the phase modules use the backends, never each other."""

import ast

import pytest

from conftest import REPO

# Lowest first. A module may import only from strictly lower floors: backends below phases, phases below the
# batch (coverage) and the runner. Two modules on one floor never import each other, except in a room: `pkg.*` names
# every module of a package that no other floor names, and these may import each other, never in a circle (so a new
# prototype is one notebook and one row of `EXPRESSIONS`, with no floor to add here).
FLOORS = [
    {"core"},
    {"hf", "quant"},  # quant: the FP8 and MXFP4 formats by their definitions
    {"moe_probe", "checkpoint"},
    {"adapter", "dequant"},  # dequant: a checkpoint's dequantized tensors held to the formats' definitions
    {"replacement"},
    {"prototypes.common"},  # kernels and helpers several prototypes (and the extensions) share
    {"extensions", "expression"},
    {"prototypes.*"},  # a room: every prototype, one core change each, on `Expression` and the common kernels
    {"prototypes"},  # the index: `EXPRESSIONS`, `expression_of`, `swap_titan_moe`
    {"synth", "cpu_compat", "exact"},
    {"compare", "traces", "trained", "sharding.plan", "published"},  # sharding: a package by concern, its index on top
    {"aux_loss"},  # HF's auxiliary load-balancing loss, its prototype and their check (on compare and the prototypes)
    {"sharding.per_token", "sharding.indexers", "sharding.check", "sharding.styles"},
    {"sharding.attention"},
    {"sharding.mixers"},
    {"sharding.rules"},
    {"sharding.apply"},
    {"sharding"},  # the index re-exports its modules' API
    # the wrong plans phase 4's worker runs, torchtitan's bugs it replays, torchtitan's load balancing it runs
    {"worker_controls", "replays", "load_balancing"},
    {"alignment", "parallel_worker", "native.family", "gradients"},  # gradients: training, HF against Titan
    # native: one module per family, CPU, and torchtitan's own loader (DCP with the adapter's storage reader)
    {"native.qwen3", "native.deepseek_v3", "native.gpt_oss", "native.load", "native.reader"},
    {
        "native.mapping",
        "native.mtp",
    },  # the table NATIVE, one row per family; DeepSeek-V3's MTP layer as HF can judge it
    {"native.compare"},
    {"native.controls"},
    {"native.training"},  # training parity of the native model against HF
    {"native.export"},  # the native model written back in HF's keys, exactly
    {"native.parallel"},  # the native model under torchtitan's own parallelize (torchrun), and its sharded export
    {"native.pipeline_worker"},  # torchtitan's pipeline_llm on every rank (torchrun), the stages gathered
    {"native.pipeline"},  # pipeline parallelism's launch, one-process check and record
    # torchtitan's HF backend, judged: where it is imported from, the model it meets, the workflow's steps on it
    {"backend.source"},
    {"backend.subject", "backend.patches"},  # the model as the backend meets it; the change to the backend's folder
    {"backend.steps"},  # 1c-1f
    {"backend.load"},  # the swap, loaded strictly
    {"backend.forward"},  # the blocks and the whole model against HF
    # every step for one model on one backend, and the fresh process's worker; what torchtitan's trainer needs on CPU
    {"backend.run", "backend.trainer_cpu"},
    {"backend.trainer_worker"},  # torchtitan's trainer under torchrun, one launch, judged against HF and one process
    # the phases (pipeline_hf: phase 4 under pipeline parallelism, its torchrun worker and its record; backend.
    # trainer_phase: the workflow's phase 4 on torchtitan's trainer, its launches, root causes and records)
    {
        "probe",
        "config",
        "equivalence",
        "training",
        "gap",
        "pretrained",
        "parallelism",
        "pipeline_hf",
        "backend.phase",
        "backend.trainer_phase",
    },
    {"native.phase"},  # the native phase: it runs phase 3b on the folder the export writes
    {"native", "backend"},  # the packages' indexes, which re-export their modules' names
    {"report_pages", "doc_native", "doc_backend"},  # the HTML pages of every record; the doc's native, pipeline and
    # backend sections
    {"coverage", "compat_doc"},
    {"incremental"},  # what a record was computed from, current or stale, the reports root's lock
    {"runner"},
]
FLOOR = {m: i for i, floor in enumerate(FLOORS) for m in floor}
ROOMS = {m[:-2] for m in FLOOR if m.endswith(".*")}  # the packages whose unnamed modules share a floor
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


def room_of(module: str) -> str | None:
    "The room (`pkg.*`) a module lies in where no floor names it; else None."
    package = module.rpartition(".")[0]
    return f"{package}.*" if package in ROOMS and module not in FLOOR else None


def floor_of(module: str) -> int | None:
    return FLOOR.get(module, FLOOR.get(room_of(module) or "", None))


def source_path(module: str):
    path = LIB.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _known(dotted: str) -> str:
    "The longest module of moe_bench that `dotted` (a name under moe_bench) names or lies in."
    parts = dotted.split(".")
    while parts and ".".join(parts) not in MODULES:
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
                names = [".".join(base + ([node.module] if node.module else []) + [a.name]) for a in node.names]
            elif (node.module or "").startswith("moe_bench"):  # a name, or a module of a package (`_known` tells)
                names = [".".join(node.module.split(".")[1:] + [a.name]) for a in node.names]
            else:
                continue
            out |= {_known(n) for n in names if n}
        elif isinstance(node, ast.Import):
            out |= {_known(a.name.split(".", 1)[1]) for a in node.names if a.name.startswith("moe_bench.")}
    return out - {module}


def test_every_module_has_a_floor():
    "Every module has a floor; every floor names a module (a room at least one)."
    assert not [m for m in MODULES if floor_of(m) is None]
    named = {m for m in FLOOR if not m.endswith(".*")} | {f"{r}.*" for r in ROOMS if any(room_of(m) for m in MODULES)}
    assert named == set(FLOOR) and named - {f"{r}.*" for r in ROOMS} <= set(MODULES), set(FLOOR) - named


def upward_imports(module: str, source: str | None = None) -> list[str]:
    "What `module` imports from its own floor or above (a module of its own room aside)."
    room = room_of(module)
    return sorted(
        m
        for m in imports_of(module, source)
        if (floor_of(m) if floor_of(m) is not None else len(FLOORS)) >= floor_of(module)
        and not (room and room_of(m) == room)
    )


@pytest.mark.parametrize("module", MODULES)
def test_imports_only_from_lower_floors(module):
    assert not upward_imports(module), f"{module} (floor {floor_of(module)}) imports {upward_imports(module)}"


def circle(graph: dict[str, set[str]]) -> list[str]:
    "One import circle in `graph` (module -> the modules it imports), as the path that closes it; [] where none."
    state, path = {}, []

    def visit(m: str) -> list[str]:
        state[m] = "open"
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                return path[path.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = "done"
        path.pop()
        return []

    return next((found for m in sorted(graph) if m not in state and (found := visit(m))), [])


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_no_circle_within_a_room(room):
    "The modules of a room import each other without a circle."
    members = [m for m in MODULES if room_of(m) == f"{room}.*"]
    graph = {m: {n for n in imports_of(m) if n in members} for m in members}
    assert len(members) > 1 and not circle(graph), circle(graph)


def test_the_circle_check_sees_a_circle():
    "Negative control: a -> b -> c -> a is found and named; a chain and a diamond are not circles."
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}) == []


def test_a_room_module_may_not_import_upward():
    "Negative control: a prototype importing a phase is reported; one importing another prototype is not."
    module = next(m for m in MODULES if room_of(m) == "prototypes.*")
    assert upward_imports(module, "from ..probe import probe_model\nfrom .clamped_glu import x") == ["probe"]


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


def named_prototypes(module: str, source: str | None = None) -> list[str]:
    "The prototypes `module` imports by name (`prototypes.<name>`; the shared `prototypes.common` is no prototype)."
    return sorted(m for m in imports_of(module, source) if room_of(m) == "prototypes.*")


@pytest.mark.parametrize("module", [m for m in MODULES if m != "prototypes" and not m.startswith("prototypes.")])
def test_no_central_module_names_a_prototype(module):
    "A prototype registers through its `Expression` (and its classes' own attributes), so a central module loops over"
    " `EXPRESSIONS`: a new prototype is its notebook and its row in `EXPRESSIONS`, nothing else to remember."
    assert not named_prototypes(module), f"{module} imports {named_prototypes(module)}: read it from its Expression"


@pytest.mark.parametrize(
    "source",
    [
        "from .prototypes.per_modality import routed_output",
        "from moe_bench.prototypes.hash_routing import HashRouter",
        "def f():\n    from .prototypes import clamped_glu\n",
    ],
)
def test_the_prototype_check_sees_a_named_import(source):
    "Negative control: a named prototype is reported in any spelling; the index and the shared kernels are not."
    assert len(named_prototypes("traces", source)) == 1
    assert named_prototypes("traces", "from .prototypes import EXPRESSIONS\nfrom .prototypes.common import x") == []


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
NOTEBOOKS = sorted(
    p.relative_to(REPO / "nbs").as_posix()
    for p in (REPO / "nbs").rglob("*.ipynb")
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


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_export_cells_are_short(notebook):
    "No notebook, top-level or a package's, holds an export cell over MAX_EXPORT_CELL_LINES lines: a long function or"
    " table is cut by concern (a helper per step, a table continued in the next cell)."
    import json

    cells = json.loads((REPO / "nbs" / notebook).read_text())["cells"]
    assert not long_export_cells(cells), f"{notebook}: export cells (index, lines) {long_export_cells(cells)}"


def test_the_cell_check_sees_a_long_cell():
    "Negative control: a 61-line export cell is reported, a 61-line test cell and a 60-line export cell are not."
    long_cell = dict(cell_type="code", source=["#| export\n"] + ["x = 1\n"] * 60)
    short = dict(cell_type="code", source=["#| export\n"] + ["x = 1\n"] * 59)
    test = dict(cell_type="code", source=["x = 1\n"] * 61)
    assert long_export_cells([short, long_cell, test]) == [(1, 61)]


def test_a_native_family_is_one_row():
    "Everything phase 4 asks of a native family is on its `NativeFamily` row (its parallelize function among it): no"
    " module beside the family's own names a family's parallelize function, so a new family cannot pass the native"
    " phase and then meet a table that lacks it under torchrun."
    from moe_bench.native.mapping import NATIVE

    assert NATIVE and all(callable(f.parallelize) for f in NATIVE.values())
    names = {f.parallelize.__name__ for f in NATIVE.values()}
    homes = {m for m in MODULES if "FAMILY = NativeFamily(" in source_path(m).read_text()}
    assert len(homes) == len(NATIVE)
    named = {m: sorted(n for n in names if n in source_path(m).read_text()) for m in MODULES if m not in homes}
    assert not {m: n for m, n in named.items() if n}, named
