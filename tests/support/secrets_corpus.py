"""A corpus of secrets and the check that none of their fragments leaked."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.redaction import (
    MIN_FRAGMENT,
)


@dataclass(frozen=True)
class BadDsn:
    label: str
    dsn: str
    password: str


# Port 1 on loopback: nothing listens, so every connection attempt fails fast with libpq's message.
CORPUS: tuple[BadDsn, ...] = (
    BadDsn("uri-bad-percent-escape", "postgresql://app:Zq8%zzWxkv@127.0.0.1:1/db", "Zq8%zzWxkv"),
    BadDsn(
        "kv-unquoted-space", "host=127.0.0.1 port=1 user=app password=Jm7q Kx9vTr dbname=db", "Jm7q Kx9vTr"
    ),
    BadDsn("kv-trailing-backslash", "host=127.0.0.1 port=1 user=app password=Tr4ilQz\\", "Tr4ilQz\\"),
    BadDsn("kv-unbalanced-quote", "host=127.0.0.1 port=1 user=app password='Ub4lQzXy dbname=db", "Ub4lQzXy"),
    BadDsn("uri-query-password", "postgresql://app@127.0.0.1:1/db?password=QpW9xRt7", "QpW9xRt7"),
    BadDsn("uri-userinfo-space", "postgresql://app:Sp4c Ey7Kq@127.0.0.1:1/db", "Sp4c Ey7Kq"),
    BadDsn("kv-quoted-with-space", "host=127.0.0.1 port=1 user=app password = 'Qv3b Hx8Zm'", "Qv3b Hx8Zm"),
    BadDsn("uri-multiple-hosts", "postgresql://app:Mh7Kq2Zx@127.0.0.1:1,127.0.0.1:2/db", "Mh7Kq2Zx"),
    BadDsn("uri-non-ascii", "postgresql://app:Nä7Kßq2Zé@127.0.0.1:1/db", "Nä7Kßq2Zé"),
    BadDsn("kv-empty-password", "host=127.0.0.1 port=1 user=app password=", ""),
    BadDsn("uri-unescaped-at", "postgresql://app:Qx@Zk7@Wv9m@127.0.0.1:1/db", "Qx@Zk7@Wv9m"),
    BadDsn("uri-bad-sslmode", "postgresql://app:Sl7Mq3Zx@127.0.0.1:1/db?sslmode=bogus", "Sl7Mq3Zx"),
    BadDsn("kv-bad-port", "host=127.0.0.1 port=notaport user=app password=Pt7Kq3Zx", "Pt7Kq3Zx"),
    BadDsn("uri-unbalanced-bracket", "postgresql://app:Br7Kq3Zx@[::1/db", "Br7Kq3Zx"),
    BadDsn("uri-percent-00", "postgresql://app:Nl7K%00q3Zx@127.0.0.1:1/db", "Nl7K%00q3Zx"),
    BadDsn("kv-unknown-key", "host=127.0.0.1 port=1 user=app password=Uk7Kq3Zx bogus=1", "Uk7Kq3Zx"),
    BadDsn("kv-escaped-quote", "host=127.0.0.1 port=1 user=app password='Es\\'c7\\\\Kq3Z'", "Es'c7\\Kq3Z"),
    BadDsn("uri-ssl-password", "postgresql://app@127.0.0.1:1/db?sslpassword=Ss7Kq3Zx", "Ss7Kq3Zx"),
)


def fragments(password: str) -> set[str]:
    """The password and every run of MIN_FRAGMENT characters of it (as written and %-decoded)."""
    out = {password} if password else set()
    for word in {password, password.replace("%zz", "")}:
        out |= {word[i : i + MIN_FRAGMENT] for i in range(len(word) - MIN_FRAGMENT + 1)}
    return out


def assert_no_fragment(text: str, bad: BadDsn) -> None:
    leaked = sorted(f for f in fragments(bad.password) if f in text)
    assert not leaked, f"{bad.label}: {leaked} of the password in {text!r}"
