"""The import direction of DESIGN's layers, checked on the source (not by importing)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "simcoll"
PURE = ["topology", "algorithms", "analytical", "schedule.py", "checks.py", "units.py",
        "collectives.py", "errors.py", "results.py", "protocols.py", "numeric.py",
        "network/fairshare.py", "trace.py", "timeline.py", "scenario.py"]  # fmt: skip
ENGINE_ONLY = ("simpy",)
FORBIDDEN_IN_PURE = ("simpy", "matplotlib", "simcoll.engine", "simcoll.network.fabric",
                     "simcoll.network.packet", "simcoll.plot", "simcoll.cli", "torch",
                     "validation")  # fmt: skip


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def _files(names: list[str]) -> list[Path]:
    out: list[Path] = []
    for name in names:
        path = PACKAGE / name
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


@pytest.mark.parametrize("path", _files(PURE), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_layers_do_not_reach_the_engine(path):
    bad = sorted(n for n in imports_of(path) if n.startswith(FORBIDDEN_IN_PURE))
    assert not bad, f"{path} imports {bad}"


def test_only_the_engine_and_the_fabric_import_simpy_and_only_plot_matplotlib():
    simpy_users, mpl_users = set(), set()
    for path in PACKAGE.rglob("*.py"):
        names = imports_of(path)
        rel = str(path.relative_to(PACKAGE))
        if any(n.startswith("simpy") for n in names):
            simpy_users.add(rel)
        if any(n.startswith("matplotlib") for n in names):
            mpl_users.add(rel)
    # The fabric of the packet model is a fabric too (DESIGN: only engine and fabric), and
    # the session is the engine of workloads (many calls on one clock and one fabric):
    # workloads are SimPy processes but reach SimPy only through the session.
    assert simpy_users == {"engine.py", "session.py", "network/fabric.py", "network/packet.py"}
    assert mpl_users
    assert all(rel.startswith("plot/") for rel in mpl_users), sorted(mpl_users)


def test_nothing_in_the_library_imports_torch_or_reads_the_environment():
    for path in PACKAGE.rglob("*.py"):
        source = path.read_text()
        assert "import torch" not in source, path
        assert "os.environ" not in source, path
