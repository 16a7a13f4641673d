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

# shellcheck source=../tier_lib.sh
tier_lib="$(dirname "$0")/../tier_lib.sh"
. "${tier_lib}" || { echo "install.sh: cannot read ${tier_lib}" >&2; exit 1; }

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

apt_install "${packages[@]}"
[ -n "$(chromium_path)" ] || skip "${packages[*]} installed but no chromium executable found"
ok
