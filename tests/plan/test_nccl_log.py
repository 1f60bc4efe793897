"""Reading plans from real NCCL logs and printing them back (simcoll.plan.nccl_log).

The excerpts are verbatim lines of logs posted in public issue threads (URL above each);
the expected rings and trees are read off the lines by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.core.errors import ConfigError
from simcoll.plan.channels import NetHop
from simcoll.plan.nccl_log import format_plan, parse_nccl_log, plan_from_log, read_nccl_log
from simcoll.plan.search import search_plan
from simcoll.topology import gpu_nodes, load

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"

# https://github.com/NVIDIA/nccl/issues/1412: 2 x 8 GPUs, NCCL 2.19+, rank 0's dump.
ISSUE_1412 = """\
node1:123:123 [0] NCCL INFO Channel 00/08 :    0   5   4   7   6   3   2   1   8  13  12  15  14  11  10   9
node1:123:123 [0] NCCL INFO Channel 01/08 :    0   5   4   7   6   3  10   9   8  13  12  15  14  11   2   1
node1:123:123 [0] NCCL INFO Channel 02/08 :    0   5   4   7  14  11  10   9   8  13  12  15   6   3   2   1
node1:123:123 [0] NCCL INFO Channel 03/08 :    0   5  12  15  14  11  10   9   8  13   4   7   6   3   2   1
"""  # noqa: E501 - log lines as NCCL prints them


def test_ring_dumps_of_nccl_2_19() -> None:
    log = parse_nccl_log(ISSUE_1412)
    assert log.rings[0] == (0, 5, 4, 7, 6, 3, 2, 1, 8, 13, 12, 15, 14, 11, 10, 9)
    assert log.rings[3] == (0, 5, 12, 15, 14, 11, 10, 9, 8, 13, 4, 7, 6, 3, 2, 1)
    assert sorted(log.rings) == [0, 1, 2, 3]


def test_trees_and_pxn_connections_of_nccl_2_27() -> None:
    # 2 x 8 GPUs, one NIC per node, NCCL 2.27.5 (notes file quoted in
    # /work/notes-style reference 1.8e): rank 8's trees and two ring connections through
    # NIC 0, the send of rank 9 posted by rank 8's proxy (PXN).
    text = """\
tpgds-aihub0008:181412:181412 [1] NCCL INFO Channel 00/0 : 9[1] -> 0[0] [send] via NET/IB/0(8)/GDRDMA
tpgds-aihub0008:181411:181411 [0] NCCL INFO Channel 00/0 : 1[1] -> 8[0] [receive] via NET/IB/0/GDRDMA
tpgds-aihub0008:181411:181411 [0] NCCL INFO Trees [0] 9/-1/-1->8->0 [1] 9/-1/-1->8->0 [2] 9/0/-1->8->-1 [3] 9/0/-1->8->-1
tpgds-aihub0008:181411:181411 [0] NCCL INFO Channel 00/04 :    0   8  15  14  13  12  11  10   9   1   7   6   5   4   3   2
"""  # noqa: E501
    log = parse_nccl_log(text)
    # Channel 0: rank 8 has child 9 in its node and parent 0; channel 2 (tree 1): root,
    # children 9 and 0.
    assert log.tree_links[0][8] == ((9,), 0)
    assert log.tree_links[2][8] == ((9, 0), -1)
    assert log.net[0, 9, 0] == [0, None, 8]  # NIC 0 on the sender's side, proxy rank 8
    assert log.net[0, 1, 8][1] == 0  # NIC 0 on the receiver's side
    assert log.rings[0][:3] == (0, 8, 15)


def test_trees_of_nccl_2_5_and_2_4() -> None:
    # https://github.com/NVIDIA/nccl/issues/392 (2.5.7): treeUp|treeDn halves.
    old = """\
[0] NCCL INFO Channel 00/02 :    0   1   2   3   4   5   6   7   8   9  10  11  12  13  14  15
[0] NCCL INFO Trees [0] 1/-1/-1->0->7|7->0->1/-1/-1 [1] 1/-1/-1->0->7|7->0->1/-1/-1
"""
    log = parse_nccl_log(old)
    assert log.rings[0] == tuple(range(16))
    assert log.tree_links[0][0] == ((1,), 7)
    # https://github.com/NVIDIA/nccl/issues/226 (2.4): up->rank->down.
    assert parse_nccl_log(old + "[0] NCCL INFO Trees [0] 26->25->-1/-1/-1\n").tree_links[0][25] == (
        (),
        26,
    )


def test_a_dump_cut_at_20_ranks_is_completed_from_the_connections() -> None:
    # https://github.com/NVIDIA/nccl/issues/820 prints 20 of 32 ranks; here a 24-rank ring
    # cut at 20, and the connection lines of the last ranks.
    ring = list(range(24))
    dump = " ".join(f"{r:3d}" for r in ring[:20])
    lines = [f"h:1:1 [0] NCCL INFO Channel 00/01 : {dump}"]
    lines += [
        f"h:1:1 [0] NCCL INFO Channel 00/0 : {a}[0] -> {b}[1] via P2P/IPC/read"
        for a, b in zip(ring, ring[1:] + ring[:1], strict=True)
    ]
    assert parse_nccl_log("\n".join(lines)).rings[0] == tuple(ring)
    with pytest.raises(ConfigError, match="channel 0"):
        parse_nccl_log(lines[0] + "\nh:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 24 nNodes 3")


def test_a_searched_plan_prints_and_reads_back_the_same() -> None:
    topology = load(TOPOLOGIES / "h100-ib-fat-tree.toml", {"n_nodes": "2"})
    plan = search_plan(topology)
    text = format_plan(plan, topology)
    assert (
        "Channel 01/16 :    0   7   6   5   4   3   2   9   8  15  14  13  12  11  10   1" in text
    )
    back = plan_from_log(parse_nccl_log(text), topology, gpu_nodes(topology))
    assert back.n_channels == plan.n_channels
    for mine, theirs in zip(plan.channels, back.channels, strict=True):
        # the log prints rings from rank 0; the same cycle
        start = mine.ring.index(0)
        assert theirs.ring == mine.ring[start:] + mine.ring[:start]
        assert theirs.tree is not None
        assert mine.tree is not None
        assert theirs.tree.parent == mine.tree.parent
        assert dict(theirs.net) == dict(mine.net)
    assert back.channels[1].net[2, 9] == NetHop("node0.nic1", "node1.nic1", proxy="gpu1")


# https://github.com/NVIDIA/nccl/issues/1453: 3 x 8 H100, 8 NICs per node, 16 channels;
# rank 0 prints the first 20 of the 24 ranks of each ring.
ISSUE_1453 = """\
Channel 05/16 :    0   7   6  13  12  11  10   9   8  15  14  21  20  19  18  17  16  23  22   5
Channel 06/16 :    0   7  14  13  12  11  10   9   8  15  22  21  20  19  18  17  16  23   6   5
Channel 07/16 :    0  15  14  13  12  11  10   9   8  23  22  21  20  19  18  17  16   7   6   5
Channel 08/16 :    0   7   6   5   4   3   2   1   8  15  14  13  12  11  10   9  16  23  22  21
Channel 09/16 :    0   7   6   5   4   3   2   9   8  15  14  13  12  11  10  17  16  23  22  21
Channel 13/16 :    0   7   6  13  12  11  10   9   8  15  14  21  20  19  18  17  16  23  22   5
"""


def test_the_search_gives_the_rings_of_a_real_3_node_h100_log() -> None:
    plan = search_plan(load(TOPOLOGIES / "h100-ib-fat-tree.toml", {"n_nodes": "3"}))
    assert plan.n_channels == 16
    for line in ISSUE_1453.splitlines():
        head, _, ranks = line.partition(" : ")
        channel = int(head.split()[1].split("/")[0])
        ring = plan.rings[channel]
        start = ring.index(0)
        assert (ring[start:] + ring[:start])[:20] == tuple(int(r) for r in ranks.split()), line


def test_bad_logs_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no rings found"):
        parse_nccl_log("hello\n")
    with pytest.raises(ConfigError, match="no such file"):
        read_nccl_log(tmp_path / "missing.log")
    binary = tmp_path / "b.log"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="UTF-8"):
        read_nccl_log(binary)
    topology = load(TOPOLOGIES / "dgx-a100.toml")
    log = parse_nccl_log(ISSUE_1412)  # 16 ranks on an 8-GPU box
    with pytest.raises(ConfigError, match=r"ring names rank 8, not one of the 8 ranks 0\.\.7"):
        plan_from_log(log, topology, gpu_nodes(topology))


CHAIN = """\
NCCL INFO comm 0x0 rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0
NCCL INFO Channel 00/01 :    0   1   2   3
NCCL INFO Trees [0] 1/-1/-1->0->-1
NCCL INFO Trees [0] 2/-1/-1->1->0
NCCL INFO Trees [0] 3/-1/-1->2->1
NCCL INFO Trees [0] -1/-1/-1->3->2
"""


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # issue 29: chain children with 3-ary parents gave 64.07 us, neither tree's time
        ({"->2->1": "->2->0", "->3->2": "->3->0"},
         "channel 0's tree: rank 1 lists 2 as a child, whose parent is 0"),
        ({"->3->2\n": "->3->2\nNCCL INFO Trees [0] -1/-1/-1->9->0\n"},
         "channel 0's tree names rank 9, not one of the 4 ranks 0..3"),
        ({"->1->0": "->1->99"}, "channel 0's tree (rank 1's line) names rank 99, not one of the 4 "
         "ranks 0..3"),
        ({"2/-1/-1->1": "99/-1/-1->1"}, "channel 0's tree (rank 1's line) names rank 99, not one "
         "of the 4 ranks 0..3"),
        # children in a cycle (with parents to match) grew top_down to 3.4 GB
        ({"1/-1/-1->0->-1": "-1/-1/-1->0->-1", "->1->0": "->1->3", "-1/-1/-1->3": "1/-1/-1->3"},
         "channel 0's tree does not reach rank 1 from its root 0 (a cycle)"),
        ({"->3->2": "->3->-1", "3/-1/-1->2": "-1/-1/-1->2"}, "channel 0's tree has 2 roots, "
         "not one"),
        ({"Channel 00/01 :    0   1   2   3": "Channel 00/01 :    0   1   2   3\n"
          "NCCL INFO Channel 00/0 : 99[1] -> 0[0] [send] via NET/IB/0/GDRDMA"},
         "channel 0's NET line 99 -> 0 names rank 99, not one of the 4 ranks 0..3"),
    ],
)  # fmt: skip
def test_a_log_whose_lines_disagree_is_refused_in_one_line(
    edit: dict[str, str], message: str
) -> None:
    text = CHAIN
    for old, new in edit.items():
        assert old in text
        text = text.replace(old, new)
    topology = load(TOPOLOGIES / "dgx-a100.toml")
    with pytest.raises(ConfigError) as info:
        plan_from_log(parse_nccl_log(text), topology, gpu_nodes(topology)[:4])
    assert str(info.value).startswith(f"<log>: {message}")
    assert "\n" not in str(info.value)


def test_a_consistent_chain_is_the_tree_it_says() -> None:
    topology = load(TOPOLOGIES / "dgx-a100.toml")
    plan = plan_from_log(parse_nccl_log(CHAIN), topology, gpu_nodes(topology)[:4])
    tree = plan.channels[0].tree
    assert tree is not None
    assert (tree.root, tree.parent, tree.children) == (0, (-1, 0, 1, 2), ((1,), (2,), (3,), ()))


def _dump(channels: range, header: int | None) -> str:
    """rank 0's ring lines, ring 0..7, each headed 'Channel cc/NN' (2.4: 'Ring cc')."""
    head = (lambda c: f"Channel {c:02d}/{header:02d}") if header else (lambda c: f"Ring {c:02d}")
    return "".join(f"h:1:1 [0] NCCL INFO {head(c)} :    0   1   2   3   4   5   6   7\n"
                   for c in channels)  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # issue 41: headed /08 with 4 lines, it ran 4 channels without a word
        (_dump(range(4), 8), "its ring lines' header ('Channel cc/08') says 8 channels, but the "
         "log has lines for 4 (channels 00..03): a log cut short? give rank 0's whole "
         "NCCL_DEBUG=INFO output"),
        (_dump(range(3), 4) + _dump(range(4, 5), 4), "its ring lines' header ('Channel cc/04') "
         "says 4 channels, but the log has lines for 4 (channels 00..02, 04): a log cut short? "
         "give rank 0's whole NCCL_DEBUG=INFO output"),
        (_dump(range(2), 2) + _dump(range(2, 4), 4), "its ring lines' headers ('Channel "
         "cc/NN') say 2 and 4 channels: the lines of several communicators? give one "
         "communicator's lines"),
    ],
)  # fmt: skip
def test_a_log_whose_channel_lines_are_not_its_headers_count_is_refused(
    text: str, message: str
) -> None:
    topology = load(TOPOLOGIES / "dgx-a100.toml")
    with pytest.raises(ConfigError) as info:
        plan_from_log(parse_nccl_log(text, source="run.log"), topology, gpu_nodes(topology))
    assert str(info.value) == f"run.log: {message}"


@pytest.mark.parametrize("header", [4, None])  # NCCL 2.5+ 'Channel 00/04', 2.4 'Ring 00'
def test_a_log_with_every_channel_its_header_counts_is_read(header: int | None) -> None:
    topology = load(TOPOLOGIES / "dgx-a100.toml")
    plan = plan_from_log(parse_nccl_log(_dump(range(4), header)), topology, gpu_nodes(topology))
    assert plan.rings == ((0, 1, 2, 3, 4, 5, 6, 7),) * 4
