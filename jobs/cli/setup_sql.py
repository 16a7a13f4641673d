"""`radar setup-sql`: the monitored servers' roles, grants and helper."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from jobs.cli.common import EXIT_SERVER_UNREADABLE


def cmd_setup_sql(args: argparse.Namespace) -> int:
    """Print the SQL that creates the monitoring and explain roles and the EXPLAIN helper (psql-ready)."""
    from jobs.plans.setup_sql import (
        DEFAULT_SERVER_VERSION_NUM,
        SetupRoles,
        SetupServerError,
        extension_step,
        read_setup_facts,
        setup_script,
        setup_steps,
    )
    from jobs.redaction import redact_dsn

    roles = SetupRoles(
        monitor_role=args.monitor_role,
        explain_role=args.explain_role,
        helper=args.helper,
        pin_role=args.pin_role,
    )
    roles.check()  # a bad name is a usage error before anything connects
    if args.dsn is None:
        version = args.server_version_num or DEFAULT_SERVER_VERSION_NUM
        sys.stdout.write(
            setup_script(setup_steps(version, args.database or ["postgres"], roles, pins=args.pins), version)
        )
        return 0
    try:
        facts = read_setup_facts(args.dsn)
    except SetupServerError as exc:
        # stderr: stdout is the script, usually redirected to a file the user would not look at.
        sys.stderr.write(f"error: setup-sql could not read the server: {exc}\n")
        return EXIT_SERVER_UNREADABLE
    steps = setup_steps(facts.server_version_num, args.database or [facts.database], roles, pins=args.pins)
    if facts.pgss_version is None:
        steps.append(extension_step(facts.database))
    notes = facts.notes(redact_dsn(args.dsn))
    sys.stdout.write(setup_script(steps, facts.server_version_num, notes))
    return 0
