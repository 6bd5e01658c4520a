#!/usr/bin/env bash
# The main job: a local cluster that trains. See README.md.
set -euo pipefail
build=${1:-build}
echo "demo: not yet wired"
