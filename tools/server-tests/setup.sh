#!/usr/bin/env bash
# Creates target/pyenv with the pinned OpenAI client and Schemathesis (requirements.txt), once.
# Safe to run concurrently (a lock) and again (a stamp records what was installed).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
env="$root/target/pyenv"
req="$root/tools/server-tests/requirements.txt"
mkdir -p "$root/target"
exec 9>"$root/target/pyenv.lock"
flock 9
if [ -f "$env/.stamp" ] && cmp -s "$req" "$env/.stamp"; then
    exit 0
fi
rm -rf "$env"
python3 -m venv "$env"
"$env/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
cp "$req" "$env/.stamp"
