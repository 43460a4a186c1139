"""Bad input and an unreachable Redis raise clear exceptions."""

import pytest

import redlease
from conftest import free_port


def test_empty_name_is_invalid(client):
    with pytest.raises(redlease.InvalidName) as raised:
        client.lock("").acquire()
    assert isinstance(raised.value, ValueError)


def test_zero_ttl_is_invalid(client):
    with pytest.raises(redlease.InvalidOption, match="ttl"):
        client.lock("x", ttl=0).acquire()


def test_negative_wait_and_wrong_types(client):
    with pytest.raises(redlease.InvalidOption):
        client.lock("x", wait=-1)
    with pytest.raises(TypeError):
        client.lock("x", ttl="10s")
    with pytest.raises(TypeError):
        client.lock(b"x")


def test_redis_down_raises_connection_error():
    with pytest.raises(redlease.ConnectionError) as raised:
        redlease.Client.connect(f"redis://127.0.0.1:{free_port()}")
    assert isinstance(raised.value, ConnectionError)
    assert isinstance(raised.value, redlease.Error)


def test_bad_url_raises():
    with pytest.raises(redlease.Error):
        redlease.Client.connect("not a url")


def test_wrong_permits_raise(client):
    with client.semaphore("pool", 2):
        with pytest.raises(redlease.PermitsMismatch):
            client.semaphore("pool", 3, wait=0).acquire()
