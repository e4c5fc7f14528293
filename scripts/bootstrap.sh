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

apt_install() {  # apt_install SUDO PACKAGE...: Debian's packages, quietly
    local sudo=$1; shift
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if ! .venv/bin/python -c 'from browserworker.runtime import find_chromium; find_chromium()' >/dev/null 2>&1; then
    echo "==> no Chromium found: installing Debian's chromium and chromium-headless-shell packages"
    if command -v apt-get >/dev/null 2>&1; then
        apt_install "$SUDO" chromium chromium-headless-shell
    else
        echo "no apt-get here: install Chromium yourself (e.g. '.venv/bin/playwright install chromium')," >&2
        echo "or set BROWSERWORKER_CHROMIUM=/path/to/chrome" >&2
        exit 1
    fi
fi
# Headless runs use Chromium's headless shell where there is one (half the CPU per context):
# added beside a Chromium already here when that takes no password.
HEADLESS='from browserworker.runtime import find_chromium; print(find_chromium(headless=True))'
if [ -z "${BROWSERWORKER_CHROMIUM:-}" ] && ! .venv/bin/python -c "$HEADLESS" | grep -q 'headless.shell'; then
    if command -v apt-get >/dev/null 2>&1 && { [ -z "$SUDO" ] || sudo -n true 2>/dev/null; }; then
        echo "==> installing Debian's chromium-headless-shell package (headless runs use it)"
        apt_install "${SUDO:+sudo -n}" chromium-headless-shell || echo "==> could not install it: headless runs use the full Chromium" >&2
    fi
fi
.venv/bin/python -c 'from browserworker.runtime import find_chromium; print("==> Chromium:", find_chromium(), "(headless:", find_chromium(headless=True) + ")")'
