#!/usr/bin/env bash
# What the suite needs beyond Python (called by `make setup`):
#   bubblewrap  the sandbox of the humaneval and terminal environments (envs/api/sandbox.py); without it
#               those environments refuse to start and their tests skip
#   Java 17     the scienceworld environment's simulator (a jar)
# As root with apt-get, it installs what is missing; otherwise it prints the one command to run and
# goes on (the rest of the suite works without them). SYSTEM_DEPS=0 skips this step.
set -u
[ "${SYSTEM_DEPS:-1}" = 0 ] && exit 0
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
[ "${java_major:-0}" -ge 17 ] 2>/dev/null || missing+=(openjdk-17-jre-headless)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing ${missing[*]} (apt-get)"
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 \
             && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; }; then
        exit 0
    fi
    echo "[setup] apt-get could not install ${missing[*]}; the suite runs without them (see below)"
fi
echo "[setup] not installed: ${missing[*]}. The humaneval and terminal environments" \
  "(and River) need bubblewrap,"
echo "[setup] scienceworld needs Java 17; their tests skip without them. To install (Debian/Ubuntu):"
echo "    sudo apt-get install -y ${missing[*]}"
exit 0
