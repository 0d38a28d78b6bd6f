#!/usr/bin/env bash
# The main job: 14 checked test submission files + zip, then a scored val run.
#   ./run.sh [--out DIR] [other `mushroom main-job` options]
set -euo pipefail
cd "$(dirname "$0")"
if command -v mushroom >/dev/null 2>&1; then
  exec mushroom main-job "$@"
fi
exec python3 -m mushroom main-job "$@"
