#!/usr/bin/env bash
# The main job: 14 checked test submission files + zip, then a scored val run.
#   ./run.sh [--out DIR] [other `mushroom main-job` options]
#   ./run.sh CONFIG.toml [--out DIR]   runs any config from configs/ instead
set -euo pipefail
cd "$(dirname "$0")"
cmd=(python3 -m mushroom)  # this checkout's code, whatever `mushroom` is on PATH
case "${1:-}" in
  *.toml|*.yaml|*.yml) exec "${cmd[@]}" run "$@" ;;
  *) exec "${cmd[@]}" main-job "$@" ;;
esac
