#!/bin/sh
# Installs what needs Node.js: Node.js and npm from Debian's packages when they are missing,
# then, each exactly as its package-lock.json pins it (`npm ci`), the Node.js producer
# example's one npm package (examples/node: the official NATS client) and the one of
# `gym-runner secure init --operator` (runner/security/sign_jwt: NATS's official JWT library).
# Without them GymBus still works but for --operator: their tests are skipped (in CI they fail).
cd "$(dirname "$0")/.." || exit 0
missing=""
command -v node >/dev/null 2>&1 || missing=" nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        # shellcheck disable=SC2086 # one word per package
        apt-get update -qq && apt-get install -y -qq $missing >/dev/null
    fi
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        echo "note:$missing not installed (apt-get install$missing, as root); the tests that need node will be skipped" >&2
        exit 0
    fi
fi
for folder in examples/node runner/security/sign_jwt; do
    npm ci --prefix "$folder" --no-audit --no-fund --loglevel=error || \
        echo "note: npm ci in $folder failed; the tests that need it will be skipped" >&2
done
exit 0
