"""`radar metrics` and `radar serve-metrics`: the lake's Prometheus exposition (jobs.publish.metrics)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jobs.cli.common import lake_root, say, settings_of


def cmd_metrics(args: argparse.Namespace) -> int:
    """The exposition once: to stdout, or written atomically to a node_exporter textfile; or the rules."""
    from jobs.errors import ConfigError

    settings = settings_of(args)
    if args.rules:
        from jobs.publish.metrics import rules_yaml

        sys.stdout.write(rules_yaml(settings.drift.samples, settings.metrics.alert_for))
        return 0
    from jobs.publish.metrics import exposition_text, write_textfile

    if args.textfile is None and args.format in ("json", "jsonl"):
        import json

        from jobs.publish.metrics import exposition_rows

        rows = exposition_rows(lake_root(args), settings.metrics)
        if args.format == "json":
            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        else:
            sys.stdout.write("".join(json.dumps(row) + "\n" for row in rows))
        return 0
    if args.textfile is None:
        sys.stdout.write(exposition_text(lake_root(args), settings.metrics))
        return 0
    target = Path(args.textfile or settings.metrics.textfile)
    if not str(target) or str(target) == ".":
        raise ConfigError("radar metrics --textfile: give a path, or set [metrics] textfile")
    if not target.parent.is_dir():
        raise ConfigError(
            f"radar metrics --textfile {target}: folder {target.parent} does not exist (node_exporter's "
            "--collector.textfile.directory)"
        )
    if target.is_dir():
        raise ConfigError(f"radar metrics --textfile {target}: is a folder; name a file ending in .prom")
    write_textfile(target, lake_root(args), settings.metrics)
    return 0  # silent: a cron job that prints on success mails every minute


def cmd_serve_metrics(args: argparse.Namespace) -> int:
    """Serve the exposition over HTTP until interrupted (SIGINT or SIGTERM: exit 0); the lake is read again
    at most once per [metrics] cache_s."""
    import errno
    import signal
    import threading

    from prometheus_client import start_http_server

    from jobs.errors import ConfigError
    from jobs.publish.metrics import lake_registry

    config = settings_of(args).metrics
    host = args.host if args.host is not None else config.host
    port = args.port if args.port is not None else config.port
    if not 0 <= port < 65536:
        raise ConfigError(f"radar serve-metrics --port {port}: give a port in 0..65535 (0: any free one)")
    registry = lake_registry(lake_root(args), config)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        why = "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise ConfigError(f"radar serve-metrics: cannot listen on {host}:{port}: {why}") from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    say(
        args,
        f"serving the lake's metrics on http://{host}:{server.server_port}/metrics "
        f"(lake read at most every {config.cache_s:g} s); Ctrl-C stops",
        markup=False,
    )
    sys.stdout.flush()
    try:
        while not stop.wait(0.5) and thread.is_alive():
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
    return 0
