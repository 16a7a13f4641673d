#!/usr/bin/env bash
# The pg_store_plans test tier's prerequisites: Debian's PostgreSQL 15 with its PGXS headers and
# pg_store_plans 1.9 built from the vendored source (it does not compile against the wheel's PG18).
#
# Idempotent: nothing is installed or built when the extension is already in PG15's folders.
# Never fails the build: when something cannot be had (not root, no apt-get, registry unreachable,
# build failure) it prints one "SKIP: <reason>" line, writes it to the status file the tests read,
# and exits 0; the tier's tests then pytest.skip with that reason.
#
# Environment (all optional):
#   PG_MAJOR             PostgreSQL major version to use (15; pg_store_plans 1.9 supports 12-17)
#   STORE_PLANS_TARBALL  source tarball (default ../shared/vendor/pg_store_plans-1.9.tar.gz)
#   STORE_PLANS_STATE    folder for the status file, build tree and logs (default build/store_plans,
#                        git-ignored; the source is extracted here, never into the repo's tracked files)
set -uo pipefail

repo="$(cd "$(dirname "$0")/../../.." && pwd)"
pg_major="${PG_MAJOR:-15}"
pg_bin="/usr/lib/postgresql/${pg_major}/bin"
pg_config="${pg_bin}/pg_config"
tarball="${STORE_PLANS_TARBALL:-${repo}/../shared/vendor/pg_store_plans-1.9.tar.gz}"
state="${STORE_PLANS_STATE:-${repo}/build/store_plans}"
status_file="${state}/status"
packages=("postgresql-${pg_major}" "postgresql-server-dev-${pg_major}")

mkdir -p "${state}"
rm -f "${status_file}"

# shellcheck source=../tier_lib.sh
tier_lib="$(dirname "$0")/../tier_lib.sh"
. "${tier_lib}" || { echo "install.sh: cannot read ${tier_lib}" >&2; exit 1; }

extension_installed() {
    [ -x "${pg_bin}/postgres" ] && [ -x "${pg_config}" ] || return 1
    local lib share
    lib="$("${pg_config}" --pkglibdir)" && share="$("${pg_config}" --sharedir)" || return 1
    [ -f "${lib}/pg_store_plans.so" ] && [ -f "${share}/extension/pg_store_plans--1.9.sql" ]
}

pgxs_present() {
    # postgresql-15 alone ships pg_config and pgxs.mk; the server headers come with postgresql-server-dev.
    [ -x "${pg_config}" ] && [ -x "${pg_bin}/postgres" ] || return 1
    [ -f "$("${pg_config}" --pgxs)" ] && [ -f "$("${pg_config}" --includedir-server)/postgres.h" ]
}

if extension_installed; then
    echo "pg_store_plans 1.9 already installed for PostgreSQL ${pg_major} (${pg_bin})"
    printf 'OK: pg_store_plans 1.9 installed for PostgreSQL %s (%s)\n' "${pg_major}" "${pg_bin}" \
        >"${status_file}"
    exit 0
fi

if ! pgxs_present; then
    apt_install "${packages[@]}"
    pgxs_present || skip "${packages[*]} installed but ${pg_config} --pgxs has no PGXS makefile or server headers"
fi

[ -f "${tarball}" ] || skip "pg_store_plans source not found at ${tarball}"
started="$(now)"
src="${state}/src"
rm -rf "${src}"
mkdir -p "${src}"
tar -xzf "${tarball}" -C "${src}" || skip "cannot extract ${tarball}"
top="$(find "${src}" -mindepth 1 -maxdepth 1 -type d | head -n 1)"
[ -n "${top}" ] && [ -f "${top}/Makefile" ] || skip "no Makefile in ${tarball}"
echo "building pg_store_plans in ${top} against ${pg_config} ..."
if ! make -C "${top}" USE_PGXS=1 PG_CONFIG="${pg_config}" >"${state}/build.log" 2>&1; then
    skip "pg_store_plans build failed against PostgreSQL ${pg_major} (log: ${state}/build.log)"
fi
if ! make -C "${top}" USE_PGXS=1 PG_CONFIG="${pg_config}" install >"${state}/install.log" 2>&1; then
    skip "pg_store_plans make install failed (log: ${state}/install.log)"
fi
extension_installed || skip "make install ran but pg_store_plans is not in ${pg_config}'s folders"
echo "build + install: $(since "${started}") s"
printf 'OK: pg_store_plans 1.9 built and installed for PostgreSQL %s (%s)\n' "${pg_major}" "${pg_bin}" \
    >"${status_file}"
cat "${status_file}"
