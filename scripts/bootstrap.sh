#!/usr/bin/env bash
# Set up everything browserworker needs on a fresh machine: a venv with the package, its
# test and docs tools, and a Chromium (Debian's package when none is found).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "browserworker needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv"
    "$PYTHON" -m venv .venv
fi
echo "==> installing browserworker, its test tools and its docs tools into .venv"
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test,docs,mcp]"

if ! .venv/bin/python -c 'from browserworker.runtime import find_chromium; find_chromium()' >/dev/null 2>&1; then
    echo "==> no Chromium found: installing Debian's chromium package"
    if command -v apt-get >/dev/null 2>&1; then
        SUDO=""
        if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
    else
        echo "no apt-get here: install Chromium yourself (e.g. '.venv/bin/playwright install chromium')," >&2
        echo "or set BROWSERWORKER_CHROMIUM=/path/to/chrome" >&2
        exit 1
    fi
fi
.venv/bin/python -c 'from browserworker.runtime import find_chromium; print("==> Chromium:", find_chromium())'
