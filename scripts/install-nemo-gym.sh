#!/bin/sh
# Builds the virtual environments of the NeMo Gym servers (and agents) the tests host (the
# list is tests/integration/nemo_gym_servers.txt), with GymBus's own `gym-runner nemo-gym
# install`, so run it after GymBus's venv is installed: each server for the default release
# (nemo-gym 0.7.0), and for the releases its line names with `also:<release>` (0.4.0).
#
# nemo-gym 0.7.0 declares Python 3.13.14 or later; any Python 3.13 runs it (GymBus tells the
# installer to resolve for 3.13.14), and 0.4.0 runs on 3.12 or 3.13. One is found as
# `python3.13`/`python3.12` on PATH, among pyenv's versions (`pyenv install 3.13`), or named
# by $GYMBUS_NEMO_GYM_PYTHON. Everything comes from PyPI. Environments go to
# $GYMBUS_NEMO_GYM_HOME (default ~/.cache/gymbus/nemo-gym); servers whose requirements are
# the same share one. A second run finds them built and returns in seconds. Where no Python
# 3.13 can be found or the install fails, the tests that need them are skipped, but in CI
# ($CI set) that is a failure.
set -eu

cd "$(dirname "$0")/.."
LIST=tests/integration/nemo_gym_servers.txt
fail() {
    if [ -n "${CI:-}" ]; then
        echo "NeMo Gym servers could not be installed: $1 (in CI this is a failure)" >&2
        exit 1
    fi
    echo "warning: NeMo Gym servers not installed ($1); their tests will be skipped" >&2
    exit 0
}

if [ -z "${GYMBUS_NEMO_GYM_PYTHON:-}" ] && ! command -v python3.13 >/dev/null 2>&1 \
    && ! ls "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/3.13.* >/dev/null 2>&1; then
    fail "no Python 3.13 (pyenv install 3.13, or set GYMBUS_NEMO_GYM_PYTHON)"
fi
SERVERS=$(grep -v '^#' "$LIST" | awk 'NF { print $1 }')
# shellcheck disable=SC2086 # one argument per server
.venv/bin/gym-runner nemo-gym install $SERVERS || fail "nemo-gym $(.venv/bin/python -c 'from gymbus.functions.nemo_gym import NEMO_GYM_VERSION; print(NEMO_GYM_VERSION)')"
for RELEASE in $(grep -v '^#' "$LIST" | tr ' ' '\n' | sed -n 's/^also://p' | sort -u); do
    ALSO=$(grep -v '^#' "$LIST" | awk -v want="also:$RELEASE" '{ for (i = 4; i <= NF; i++) if ($i == want) print $1 }')
    # shellcheck disable=SC2086
    GYMBUS_NEMO_GYM_VERSION=$RELEASE .venv/bin/gym-runner nemo-gym install $ALSO || fail "nemo-gym $RELEASE"
done
