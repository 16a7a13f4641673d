#!/usr/bin/env bash
# The browser test tier's prerequisite: Debian's chromium, to render the HTML weekly report headless.
#
# Idempotent: nothing is installed when /usr/bin/chromium (or chromium on PATH) is already there.
# Never fails the build: when chromium cannot be had (not root, no apt-get, registry unreachable) it
# prints one "SKIP: <reason>" line, writes it to the status file the tests read, and exits 0; the tier's
# tests then pytest.skip with that reason.
#
# Environment (all optional):
#   BROWSER_STATE  folder for the status file and logs (default build/browser, git-ignored)
set -uo pipefail

repo="$(cd "$(dirname "$0")/../../.." && pwd)"
state="${BROWSER_STATE:-${repo}/build/browser}"
status_file="${state}/status"
packages=(chromium)

mkdir -p "${state}"
rm -f "${status_file}"

skip() {
    echo "SKIP: $*"
    printf 'SKIP: %s\n' "$*" >"${status_file}"
    exit 0
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

chromium_path() {
    if [ -x /usr/bin/chromium ]; then
        echo /usr/bin/chromium
    else
        command -v chromium 2>/dev/null
    fi
}

ok() {
    local path version
    path="$(chromium_path)"
    version="$("${path}" --version 2>/dev/null | head -n 1)"
    echo "chromium ready: ${path} (${version:-version unknown})"
    printf 'OK: %s (%s)\n' "${path}" "${version:-version unknown}" >"${status_file}"
    exit 0
}

[ -n "$(chromium_path)" ] && ok

[ "$(id -u)" = 0 ] || skip "not root: cannot apt-get install ${packages[*]} (install it, then rerun)"
command -v apt-get >/dev/null || skip "no apt-get on this machine: cannot install ${packages[*]}"
started="$(now)"
echo "apt-get update (once) and install ${packages[*]} ..."
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-o DPkg::Lock::Timeout=300 -o Acquire::Retries=2 -o Acquire::http::Timeout=30)
if ! apt-get "${apt_opts[@]}" update -qq >"${state}/apt-update.log" 2>&1; then
    skip "apt-get update failed (package registry unreachable?): $(tail -n 1 "${state}/apt-update.log")"
fi
if ! apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${packages[@]}" \
    >"${state}/apt-install.log" 2>&1; then
    skip "apt-get install ${packages[*]} failed: $(tail -n 1 "${state}/apt-install.log")"
fi
[ -n "$(chromium_path)" ] || skip "${packages[*]} installed but no chromium executable found"
echo "apt: $(since "${started}") s"
ok
