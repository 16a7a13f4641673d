# Shared by the test tiers' install.sh scripts (sourced, not run): the SKIP protocol and one apt-get step.
#
# A tier's installer never fails the build: when its prerequisite cannot be had it prints one
# "SKIP: <reason>" line, writes it to ${status_file} (which the tier's tests read) and exits 0.
# The sourcing script sets ${state} (a folder for logs) and ${status_file} before calling these.

skip() {
    echo "SKIP: $*"
    printf 'SKIP: %s\n' "$*" >"${status_file}"
    exit 0
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# apt_install PACKAGE...: one `apt-get update` and a non-interactive install as root; SKIP when not root,
# without apt-get, or when either step fails (the last log line is the reason).
apt_install() {
    [ "$(id -u)" = 0 ] || skip "not root: cannot apt-get install $* (install them, then rerun)"
    command -v apt-get >/dev/null || skip "no apt-get on this machine: cannot install $*"
    local started
    started="$(now)"
    echo "apt-get update (once) and install $* ..."
    export DEBIAN_FRONTEND=noninteractive
    local apt_opts=(-o DPkg::Lock::Timeout=300 -o Acquire::Retries=2 -o Acquire::http::Timeout=30)
    if ! apt-get "${apt_opts[@]}" update -qq >"${state}/apt-update.log" 2>&1; then
        skip "apt-get update failed (package registry unreachable?): $(tail -n 1 "${state}/apt-update.log")"
    fi
    if ! apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "$@" \
        >"${state}/apt-install.log" 2>&1; then
        skip "apt-get install $* failed: $(tail -n 1 "${state}/apt-install.log")"
    fi
    echo "apt: $(since "${started}") s"
}
