#!/usr/bin/env bash
# Make sure the PostgreSQL server the tests use is up (the tests fail, not skip, without it).
# $BROWSERWORKER_TEST_PG names a server of your own; otherwise the local cluster at
# 127.0.0.1:5432 (user postgres) is started if it is down, as Debian's tools do it.
set -euo pipefail
if [ -n "${BROWSERWORKER_TEST_PG:-}" ]; then
    exit 0
fi
ready() { pg_isready -q -h 127.0.0.1 -p 5432 -t 2 2>/dev/null; }
if ready; then
    exit 0
fi
if command -v pg_lsclusters >/dev/null 2>&1; then
    for version in $(ls /etc/postgresql 2>/dev/null); do
        echo "==> starting the local PostgreSQL $version cluster"
        pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
    done
fi
for _ in $(seq 1 30); do
    if ready; then
        exit 0
    fi
    sleep 1
done
echo "PostgreSQL is not reachable at 127.0.0.1:5432: start it, or set BROWSERWORKER_TEST_PG to a server URL" >&2
exit 1
