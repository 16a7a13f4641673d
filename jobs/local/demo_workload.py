"""A small, real OLTP workload for the demo, the tests and the benchmarks.

Several query shapes run through psycopg with *typed* parameters (psycopg would otherwise send a Python
int as int2/int4/int8 by value and split one SQL text into several queryids). Workers are threads with
their own connection; every loop is bounded by a stop event and a deadline, so nothing runs on forever.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from psycopg import ClientCursor
from psycopg.types.numeric import Int4, Int8

from jobs.sqlfiles import load_sql


@dataclass(frozen=True)
class WorkloadShape:
    """One query shape: its SQL file and how to draw parameters for it."""

    name: str
    sql_file: str
    weight: float
    params: Callable[[random.Random, int], tuple[object, ...]]


def _orders_params(rng: random.Random, customers: int) -> tuple[object, ...]:
    return (Int4(rng.randint(1, customers)),)


def _customer_params(rng: random.Random, customers: int) -> tuple[object, ...]:
    return (Int4(rng.randint(1, customers)),)


def _join_params(rng: random.Random, customers: int) -> tuple[object, ...]:
    return (Int4(rng.randint(0, 16)), Int8(10**9))


def _event_params(rng: random.Random, customers: int) -> tuple[object, ...]:
    return (Int4(rng.randint(1, 9)), f"event {rng.randint(1, 10**6)}")


DEMO_SHAPES: tuple[WorkloadShape, ...] = (
    WorkloadShape("orders_by_customer", "demo_orders_by_customer", 0.45, _orders_params),
    WorkloadShape("customer_by_id", "demo_customer_by_id", 0.25, _customer_params),
    WorkloadShape("touch_customer", "demo_touch_customer", 0.10, _customer_params),
    WorkloadShape("log_event", "demo_log_event", 0.10, _event_params),
    WorkloadShape("customer_orders_join", "demo_customer_orders_join", 0.10, _join_params),
)


@dataclass(frozen=True)
class WorkloadSize:
    customers: int = 20_000
    orders: int = 300_000


def create_demo_schema(dsn: str, size: WorkloadSize = WorkloadSize()) -> None:
    """(Re)create the demo tables with data and the index the bad deploy drops."""
    with psycopg.connect(dsn, autocommit=True, cursor_factory=ClientCursor) as conn:
        conn.execute(load_sql("demo_schema"), {"customers": size.customers, "orders": size.orders})


def drop_orders_index(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(load_sql("demo_drop_orders_index"))


@dataclass
class WorkloadRunner:
    """Run the shapes on one server from ``threads`` connections until stopped or ``max_seconds``."""

    dsn: str
    threads: int = 2
    seed: int = 7
    size: WorkloadSize = field(default_factory=WorkloadSize)
    shapes: tuple[WorkloadShape, ...] = DEMO_SHAPES
    max_seconds: float = 600.0
    pause_s: float = 0.0
    calls: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for index in range(self.threads):
            worker = threading.Thread(target=self._run, args=(self.seed * 1000 + index,), daemon=True)
            worker.start()
            self._workers.append(worker)

    def stop(self) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=30)

    def _run(self, seed: int) -> None:
        rng = random.Random(seed)
        texts = {s.name: load_sql(s.sql_file) for s in self.shapes}
        weights = [s.weight for s in self.shapes]
        deadline = time.monotonic() + self.max_seconds
        local: Counter[str] = Counter()
        failures: Counter[str] = Counter()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set() and time.monotonic() < deadline:
                shape = rng.choices(self.shapes, weights)[0]
                try:
                    conn.execute(texts[shape.name], shape.params(rng, self.size.customers))
                    local[shape.name] += 1
                except psycopg.Error as exc:
                    failures[f"{shape.name}: {type(exc).__name__}"] += 1
                if self.pause_s:
                    time.sleep(self.pause_s)
        with self._lock:
            self.calls.update(local)
            self.errors.update(failures)


@dataclass
class LockContention:
    """A transient, harmless latency bump: hold row locks that writers wait for, in short bursts."""

    dsn: str
    hold_s: float = 0.05
    every_s: float = 0.1
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        with psycopg.connect(self.dsn) as conn:
            while not self._stop.is_set():
                with conn.transaction():
                    conn.execute(load_sql("demo_lock_customers"))
                    time.sleep(self.hold_s)
                time.sleep(max(0.0, self.every_s - self.hold_s))
