#!/usr/bin/env bash
# Regenerates requirements/lock.txt, the versions the project is tested on: every extra of pyproject.toml
# resolved once by uv for every platform and Python it supports (--universal), torch held at
# requirements/torch.txt's release. The README's installs and .ci/run pass it to pip as constraints
# (`-c requirements/lock.txt`), so pip never searches (the resolver backtracked for 10-26 minutes without it);
# pyproject.toml keeps its loose ranges for those who install albertlm into an environment of their own.
# Run after any change to pyproject.toml's dependencies or to torch.txt (tests/test_lock.py fails until
# then); uv keeps every pin the change does not force to move. Needs uv (`pip install uv`) and PyPI.
#
#     requirements/lock.sh                    # then commit requirements/lock.txt
#     requirements/lock.sh --upgrade          # every package to its newest allowed version (then run the tests)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v uv >/dev/null; then
    echo "requirements/lock.sh needs uv: pip install uv" >&2
    exit 1
fi
uv pip compile pyproject.toml --all-extras --universal -c requirements/torch.txt -o requirements/lock.txt "$@"
