"""Root conftest: doctests in simcoll/ run from the repository root with numpy as np."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _doctest_setup(doctest_namespace: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    doctest_namespace["np"] = np
    monkeypatch.chdir(Path(__file__).parent)  # doctests name files relative to the repo
    for name in list(os.environ):
        if name.startswith(("NCCL_", "SIMCOLL_")):
            monkeypatch.delenv(name)
