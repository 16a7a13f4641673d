"""Each integration test starts with no current Dagster definitions-state storage.

A DagsterInstance entered as a context sets Dagster's current DefsStateStorage (a ContextVar holding a weak
reference to the instance); one test's instance left there made a later test's ``dg.materialize`` fail with
"Attempted to resolve undefined DagsterInstance weakref" once that instance was gone (the sharded-assets
tests, after the metadata tests, in one order of the suite and not in another). Each test here runs with
the storage unset, as a fresh process would, and restores it after (the tests that use Dagster are in
several folders here).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dagster._core.storage.defs_state.base import set_defs_state_storage


@pytest.fixture(autouse=True)
def no_leftover_defs_state_storage() -> Iterator[None]:
    with set_defs_state_storage(None):
        yield
