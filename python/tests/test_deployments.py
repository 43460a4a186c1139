"""Every deployment the Rust client connects to, from Python: a quorum of independent
primaries (a list of URLs), a primary found through Sentinel (`redis+sentinel://`), a
Redis Cluster (`redis+cluster://`); and the connection options (timeouts)."""

import os
import shutil
import socket
import subprocess
import time

import pytest

import redlease


def exclusive(client, name):
    with client.lock(name, ttl=5.0, wait=5.0) as guard:
        first = guard.fencing_token
    with client.lock(name, ttl=5.0, wait=5.0) as guard:
        assert guard.fencing_token > first


def test_a_quorum_of_urls(servers):
    nodes = [servers() for _ in range(3)]
    client = redlease.Client.connect([n.url for n in nodes])
    with client.lock("quorum", ttl=5.0) as guard:
        held = [n.command("EXISTS", "redlease:quorum") for n in nodes]
        assert held.count(":1") >= 2
        assert guard.is_held()
    exclusive(client, "quorum")
    # With two of three nodes down, no majority can be locked.
    nodes[0].stop()
    nodes[1].stop()
    with pytest.raises(redlease.NoQuorum):
        client.lock("quorum", wait=0).acquire()


def test_a_primary_found_through_sentinel(servers):
    sentinel_binary = shutil.which("redis-sentinel")
    if not sentinel_binary:
        pytest.fail("redis-sentinel not found: install Redis (make redis)")
    primary = servers()
    config = os.path.join(primary.dir, "sentinel.conf")
    with open(config, "w") as f:
        f.write(f"sentinel monitor main 127.0.0.1 {primary.port} 1\n")
    sentinel = servers(config, binary=sentinel_binary)
    client = redlease.Client.connect(f"redis+sentinel://127.0.0.1:{sentinel.port}/main")
    exclusive(client, "sentinel")
    with client.lock("sentinel") as guard:
        assert primary.command("EXISTS", "redlease:sentinel") == ":1"
        assert guard.owned()


def test_a_cluster_url(servers):
    nodes = [servers("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf") for _ in range(3)]
    created = subprocess.run(
        [shutil.which("redis-cli") or "redis-cli", "--cluster", "create",
         *[f"127.0.0.1:{n.port}" for n in nodes], "--cluster-replicas", "0", "--cluster-yes"],
        capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stdout + created.stderr
    deadline = time.monotonic() + 30
    while not all(_cluster_ok(n) for n in nodes):
        assert time.monotonic() < deadline, "the cluster never became ok"
        time.sleep(0.05)
    seeds = ",".join(f"127.0.0.1:{n.port}" for n in nodes)
    client = redlease.Client.connect(f"redis+cluster://{seeds}")
    for name in ("orders:1", "orders:2", "orders:3"):
        exclusive(client, name)


def _cluster_ok(node) -> bool:
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as s:
        s.sendall(b"*2\r\n$7\r\nCLUSTER\r\n$4\r\nINFO\r\n")
        reply = b""
        while b"cluster_state" not in reply:
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    return b"cluster_state:ok" in reply


def test_the_connect_timeout_bounds_a_server_that_never_answers():
    # A listening socket nobody accepts from: the TCP handshake completes, no reply ever comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(redlease.ConnectionError):
            redlease.Client.connect(url, connect_timeout=0.3)
        # Bounded by the option, not by the 5 s default (a liveness bound, not a speed).
        assert time.monotonic() - started < 4.0


def test_connection_options_are_checked():
    with pytest.raises(redlease.InvalidOption):
        redlease.Client.from_url("redis://127.0.0.1:1", connect_timeout=-1)
    with pytest.raises(redlease.InvalidOption, match="tls_key"):
        redlease.Client.from_url("redis://127.0.0.1:1", tls_cert=__file__)
    with pytest.raises(redlease.InvalidOption, match="cannot read"):
        redlease.Client.from_url("rediss://127.0.0.1:1", tls_ca="/nonexistent/ca.pem")
    with pytest.raises(redlease.InvalidOption):
        redlease.Client.from_url([])


def make_certificates(dir):
    """A CA, a server certificate for 127.0.0.1 and a client certificate (openssl, EC keys)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    with open(os.path.join(dir, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    with open(os.path.join(dir, "client.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    steps = [
        ["req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=test CA"],
        ["req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "server.crt", "-days", "2", "-extfile", "san.ext"],
        ["req", *ec, "-keyout", "client.key", "-out", "client.csr", "-subj", "/CN=test client"],
        ["x509", "-req", "-in", "client.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "client.crt", "-days", "2", "-extfile", "client.ext"],
    ]
    for step in steps:
        subprocess.run(["openssl", *step], cwd=dir, check=True, capture_output=True, timeout=60)
    return {name: os.path.join(dir, name) for name in ("ca.crt", "client.crt", "client.key")}


def test_tls_with_a_private_ca_and_a_client_certificate(servers, tmp_path):
    if not shutil.which("openssl"):
        pytest.fail("openssl not found: install it (make redis)")
    files = make_certificates(str(tmp_path))
    tls_port = None
    for _ in range(20):
        tls_port = _free_port()
        server = servers("--tls-port", str(tls_port), "--tls-cert-file", str(tmp_path / "server.crt"),
                         "--tls-key-file", str(tmp_path / "server.key"),
                         "--tls-ca-cert-file", files["ca.crt"], "--tls-auth-clients", "yes")
        if _listens(tls_port):
            break
    url = f"rediss://127.0.0.1:{tls_port}"
    client = redlease.Client.connect(url, tls_ca=files["ca.crt"], tls_cert=files["client.crt"],
                                     tls_key=files["client.key"], connect_timeout=5.0)
    exclusive(client, "tls")
    assert server.command("EXISTS", "{redlease:tls}\0fence") == ":1"
    # Without the private CA the server's certificate is not trusted.
    with pytest.raises((redlease.ConnectionError, redlease.AuthError)):
        redlease.Client.connect(url, connect_timeout=5.0)
    # Without a client certificate the server refuses the handshake.
    with pytest.raises(redlease.ConnectionError):
        redlease.Client.connect(url, tls_ca=files["ca.crt"], connect_timeout=5.0)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listens(port):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.01)
    return False
