"""The layering of ARCHITECTURE.md, checked on the source (importing would hide it: importing
any submodule runs ``simcoll/__init__.py``, which imports nearly everything)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "simcoll"


def _names(text: str) -> set[str]:
    return set(text.split())


#: Which layer may import which (besides itself), bottom to top. A layer may import any
#: layer listed for it and nothing else of simcoll; the table is ARCHITECTURE.md's.
MAY_IMPORT: dict[str, set[str]] = {
    "core": set(),
    "topology": {"core"},
    "plan": {"core", "topology"},
    "algorithms": {"core", "plan"},
    "network": {"core"},
    "sim": _names("core topology plan algorithms network"),
    "models": _names("core topology plan algorithms"),
    "output": _names("core topology sim"),
    "prediction": _names("core topology plan algorithms sim models output"),
    "calibrate": _names("core topology plan algorithms output prediction"),
    "training": _names(
        "core topology plan algorithms network sim models output prediction calibrate"
    ),
    "scenarios": _names(
        "core topology plan algorithms network sim models output prediction training"
    ),
    "cli": _names(
        "core topology plan algorithms network sim models output prediction calibrate "
        "training scenarios"
    ),
}
#: Only these import simpy: the engine (one schedule, or an execution graph of many calls
#: on one clock) and the fabrics (flows and packets). Workloads reach it through the engine.
SIMPY_USERS = {"sim/engine.py", "network/fabric.py", "network/packet.py"}


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (function-level imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def _layer(module: str) -> str | None:
    """The layer of a ``simcoll.<layer>...`` module name (None for simcoll itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


LAYER_FILES = sorted(p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE)


def test_every_subpackage_is_a_layer_of_the_table():
    layers = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert layers == set(MAY_IMPORT)


@pytest.mark.parametrize("path", LAYER_FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_layer_imports_only_the_layers_below_it(path):
    layer = path.relative_to(PACKAGE).parts[0]
    bad = sorted(
        name
        for name in imports_of(path)
        if (name == "simcoll" or name.startswith("simcoll."))
        and _layer(name) != layer
        and _layer(name) not in MAY_IMPORT[layer]
    )
    assert not bad, f"{path.relative_to(PACKAGE)} ({layer}) imports {bad}"


def test_the_table_has_no_cycle():
    seen: dict[str, int] = {}

    def depth(layer: str, stack: tuple[str, ...] = ()) -> int:
        assert layer not in stack, f"cycle: {' -> '.join((*stack, layer))}"
        if layer not in seen:
            seen[layer] = 1 + max((depth(d, (*stack, layer)) for d in MAY_IMPORT[layer]), default=0)
        return seen[layer]

    for layer in MAY_IMPORT:
        depth(layer)


def test_only_the_engine_and_the_fabrics_import_simpy_and_only_plots_matplotlib():
    simpy_users, mpl_users = set(), set()
    for path in PACKAGE.rglob("*.py"):
        names = imports_of(path)
        rel = str(path.relative_to(PACKAGE))
        if any(n.startswith("simpy") for n in names):
            simpy_users.add(rel)
        if any(n.startswith("matplotlib") for n in names):
            mpl_users.add(rel)
    assert simpy_users == SIMPY_USERS
    assert mpl_users
    assert all(rel.startswith("output/plot/") for rel in mpl_users), sorted(mpl_users)


def test_only_the_kernel_imports_numba():
    # The compiled event loop is one module; everything else stays plain Python and numpy,
    # so the reference runs wherever numba does not.
    users = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(n.split(".")[0] == "numba" for n in imports_of(path))
    }
    assert users == {"network/kernel.py"}


def test_nothing_in_the_library_imports_torch_or_validation_or_reads_the_environment():
    for path in PACKAGE.rglob("*.py"):
        names = imports_of(path)
        assert not any(n.split(".")[0] in ("torch", "validation") for n in names), path
        assert "os.environ" not in path.read_text(), path


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_every_module_says_what_it_holds(path):
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    assert docstring, f"{path.relative_to(PACKAGE)} has no module docstring"
    assert docstring.split("\n", 1)[0].strip(), "the first line says what the module holds"


def test_architecture_md_states_the_same_table():
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0].strip("`") in MAY_IMPORT:
            allowed = cells[2]
            if allowed.startswith("everything below but "):
                below = _below(cells[0].strip("`"))
                allowed_set = below - _names(allowed.removeprefix("everything below but "))
            elif allowed == "everything below":
                allowed_set = _below(cells[0].strip("`"))
            elif allowed == "everything":
                allowed_set = set(MAY_IMPORT) - {cells[0].strip("`")}
            elif allowed == "nothing of simcoll":
                allowed_set = set()
            else:
                allowed_set = _names(allowed.replace(",", " "))
            rows[cells[0].strip("`")] = allowed_set
    assert rows == MAY_IMPORT


def _below(layer: str) -> set[str]:
    """The layers listed before ``layer`` in the table (its order is bottom to top)."""
    order = list(MAY_IMPORT)
    return set(order[: order.index(layer)])
