"""The testbed's state files can no longer be used to delete what is not the testbed's
(issue 17, item 4): only root's own files are read, only the testbed's own names are
touched, and a name is recorded only once it was created.

No namespace or link is made here: the commands ``ip`` would run are recorded instead.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from validation.testbed import _system, core
from validation.testbed._system import TestbedError, cleanup_leftovers

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root-owned state needs root")

NOBODY = 65534
OURS = ["scab12-fab", "scab12-r0", "scab12-r1", "scab12-b0", "scab12-p0", "scab12-l0a"]
FOREIGN = ["eth0", "docker0", "their-netns", "sc-r0", "scab12-r0; reboot", "scAB12-r0"]


@dataclass
class System:
    """What the fake ``ip`` knows and what it was asked to do."""

    namespaces: set[str] = field(default_factory=set)
    links: set[str] = field(default_factory=set)
    fail: set[tuple[str, ...]] = field(default_factory=set)
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def run(self, argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        self.calls.append(tuple(argv))
        code = 2 if tuple(argv) in self.fail else 0
        if check and code:
            raise TestbedError(f"{' '.join(argv)}: File exists")
        if tuple(argv[:3]) == ("ip", "netns", "add"):
            self.namespaces.add(argv[3])
        elif tuple(argv[:3]) == ("ip", "netns", "del"):
            self.namespaces.discard(argv[3])
        return subprocess.CompletedProcess(list(argv), code, "", "")

    def deleted(self) -> set[str]:
        return {c[-1] for c in self.calls if "del" in c}


@pytest.fixture
def system(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> System:
    fake = System(namespaces={*OURS[:2], "their-netns"}, links={"eth0", "docker0", *OURS[2:]})
    run_dir, tmp_dir = tmp_path / "run", tmp_path / "tmp"
    monkeypatch.setattr(_system, "STATE_DIRS", (run_dir, tmp_dir))
    monkeypatch.setattr(_system, "_run", fake.run)
    monkeypatch.setattr(core, "_run", fake.run)
    monkeypatch.setattr(_system, "_netns_list", lambda: set(fake.namespaces))
    monkeypatch.setattr(core, "_netns_list", lambda: set(fake.namespaces))
    monkeypatch.setattr(_system, "_root_links", lambda: set(fake.links))
    monkeypatch.setattr(_system, "_netns_exists", lambda name: name in fake.namespaces)
    monkeypatch.setattr(_system, "_kill_netns_processes", lambda names: None)
    monkeypatch.setattr(_system, "_proc_start_time", lambda pid: None)  # its owner is dead
    return fake


def plant(folder: Path, names: list[str], *, mode: int = 0o644, owner: int = 0) -> Path:
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / "scab12.json"
    state = {"id": "ab12", "pid": 1234567, "pid_start": 42, "namespaces": names,
             "interfaces": names}  # fmt: skip
    path.write_text(json.dumps(state))
    os.chmod(path, mode)
    os.chown(path, owner, owner)
    return path


def test_only_the_testbeds_own_names_are_deleted(system: System, tmp_path: Path) -> None:
    plant(tmp_path / "run", [*OURS, *FOREIGN])
    cleanup_leftovers()
    assert system.deleted() == set(OURS)
    assert not any(name in call for call in system.calls for name in FOREIGN)


@pytest.mark.parametrize(
    ("mode", "owner", "folder_mode"),
    [
        (0o644, NOBODY, 0o700),  # not root's file
        (0o666, 0, 0o700),  # root's, but anyone may write it
        (0o664, 0, 0o700),  # root's, but its group may write it
        (0o644, 0, 0o777),  # a world-writable folder: $TMPDIR/simcoll-testbed planted
    ],
)
def test_a_state_file_root_does_not_control_is_never_read(
    system: System, tmp_path: Path, mode: int, owner: int, folder_mode: int
) -> None:
    # issue 17 item 4: a planted file made cleanup run `ip link del dev eth0`
    plant(tmp_path / "tmp", [*OURS, *FOREIGN], mode=mode, owner=owner)
    os.chmod(tmp_path / "tmp", folder_mode)
    assert cleanup_leftovers(force=True) == []
    assert system.calls == []


def test_a_symlinked_state_file_is_never_read(system: System, tmp_path: Path) -> None:
    real = plant(tmp_path / "elsewhere", OURS)
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "run" / "scab12.json").symlink_to(real)
    assert cleanup_leftovers(force=True) == []
    assert system.calls == []


STAR2 = (
    'schema = 1\nbuilder = "switch_star"\n[params]\nn_gpus = 2\nlink_bandwidth = "1 Gbit/s"\n'
    'link_latency = "0.2 ms"\nlink_kind = "ethernet"\nswitch_kind = "switch"\n'
)


def test_a_name_that_could_not_be_created_is_never_deleted(
    system: System, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 17 item 4: names were recorded before `ip netns add`, so a failed add of an
    # existing (foreign) namespace was deleted by the teardown that followed
    (tmp_path / "star2.toml").write_text(STAR2)
    bed = core.Testbed(tmp_path / "star2.toml")
    monkeypatch.setattr(core.secrets, "token_hex", lambda n: "ab12")
    # someone else's namespace appears under a testbed name after the id was claimed
    monkeypatch.setattr(core, "_netns_list", set)
    system.namespaces = {"scab12-r0"}
    system.fail.add(("ip", "netns", "add", "scab12-r0"))
    with pytest.raises(TestbedError, match="ip netns add scab12-r0: File exists"):
        bed.up()
    assert ("ip", "netns", "add", "scab12-fab") in system.calls  # made, so recorded...
    assert system.deleted() == {"scab12-fab"}  # ...and torn down; scab12-r0 is left alone
    assert ("ip", "netns", "del", "scab12-r0") not in system.calls


def test_state_files_are_written_for_root_alone(
    system: System, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "star2.toml").write_text(STAR2)
    bed = core.Testbed(tmp_path / "star2.toml")
    monkeypatch.setattr(core.Testbed, "_build", lambda self: None)
    bed.up()
    try:
        assert bed.state_file is not None
        assert bed.state_file.parent == tmp_path / "run"
        assert bed.state_file.stat().st_mode & 0o777 == 0o600
        assert (tmp_path / "run").stat().st_mode & 0o777 == 0o700
    finally:
        bed.down()
