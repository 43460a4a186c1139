"""Exclusion and rising fencing tokens across processes (os.fork() is in test_life.py)."""

import multiprocessing
import os

import redlease


def worker(url, marker, rounds, results):
    client = redlease.Client.connect(url)
    tokens, overlaps = [], 0
    for _ in range(rounds):
        with client.lock("across", ttl=5.0, wait=60.0) as guard:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                overlaps += 1
            else:
                os.close(fd)
                os.unlink(marker)
            tokens.append(guard.fencing_token)
    results.put((tokens, overlaps))


def test_processes_exclude_each_other_and_tokens_rise(redis_server, tmp_path):
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    marker = str(tmp_path / "inside")
    procs = [ctx.Process(target=worker, args=(redis_server.url, marker, 15, results)) for _ in range(3)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert all(overlaps == 0 for _, overlaps in outcomes)
    every = [t for tokens, _ in outcomes for t in tokens]
    assert len(set(every)) == 45
    for tokens, _ in outcomes:
        assert tokens == sorted(tokens)
