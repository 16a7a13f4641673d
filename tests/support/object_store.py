"""A real S3-compatible server on loopback (moto's server, in a thread) for the object-store lake tests.

The server speaks the S3 HTTP API, conditional PUTs included; the radar reaches it only through the usual
environment chain (``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``, dummy keys), as it would a real bucket.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from jobs.lake.objectpath import ObjectPath
from jobs.lake.storage import forget_stores

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "radar-test-key", "AWS_SECRET_ACCESS_KEY": "radar-test-secret-value"}


@contextmanager
def s3_server() -> Iterator[dict[str, str]]:
    """Start the server, point the environment at it, yield that environment; restore both after."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        **CREDENTIALS,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    forget_stores()
    try:
        yield env
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        forget_stores()


def new_bucket(prefix: str = "lake") -> ObjectPath:
    """A fresh, empty bucket on the running server; returns ``s3://<bucket>/<prefix>``."""
    import boto3

    name = f"radar-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return ObjectPath(f"s3://{name}/{prefix}")
