#!/bin/sh
# cli-01087 (calibrate): slow
# 'killed at 60 s while reporting: [###########...................] 15/~39 passes over the points, 54.8 s elapsed, ~88 s left'
CASE="$(cd "$(dirname "$0")" && pwd)"
REPO=$(cd "$(dirname "$0")/../../../../.." && pwd)
cd "$CASE"
[ -p fifo ] || mkfifo fifo
mkdir -p adir
ln -sfn /dev/zero zero-link
truncate -s 68157440 big
ulimit -v 4194304
PY="$REPO/.venv/bin/python"; [ -x "$PY" ] || PY=python
PYTHONPATH="$REPO" timeout 60 "$PY" -m simcoll calibrate ''"$CASE"'/m.log' --topology h100-ib-fat-tree --set n_nodes=2 --collective allreduce --algorithm all -o ''"$CASE"'/p.toml' --fit efficiency,launch_s
