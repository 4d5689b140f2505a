"""Waiting for a broker leaves no client behind (a live client keeps dialling a stopped broker and logging)."""

from __future__ import annotations

import gc

import pytest
from confluent_kafka.admin import AdminClient

from connectors.broker import free_port, wait_for_metadata
from schemas.exceptions import BrokerError


def _admins() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, AdminClient))


def test_a_failed_wait_destroys_its_client_without_a_garbage_collection() -> None:
    gc.collect()
    before = _admins()
    gc.disable()  # a reference cycle would keep the client until the next collection: none runs here
    try:
        with pytest.raises(BrokerError, match="did not answer a metadata request") as err:
            wait_for_metadata(f"127.0.0.1:{free_port()}", timeout=1.5)
        assert "127.0.0.1" in str(err.value)
        del err
        assert _admins() == before
    finally:
        gc.enable()
