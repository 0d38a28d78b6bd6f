#!/usr/bin/env bash
# The main job: 14 checked test submission files + zip, then a scored val run.
#   ./run.sh [--out DIR] [other `mushroom main-job` options]
#   ./run.sh CONFIG.toml [--out DIR]   runs any config from configs/ instead
# Paths are read from the folder you run it in, as with any command.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# this checkout's code, whatever `mushroom` is on PATH, installed or in the current folder
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
cmd=(python3 -P -m mushroom)  # -P: not a mushroom/ in the folder it is run from
case "${1:-}" in
  *.toml|*.yaml|*.yml|*.json) exec "${cmd[@]}" run "$@" ;;
  *) exec "${cmd[@]}" main-job "$@" ;;
esac
