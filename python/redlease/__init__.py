"""Correct distributed locks on Redis: fencing tokens, leases renewed while held, loss
detection, FIFO hand-off. A binding of the Rust library ``redlease``: a Python worker, a
Rust service and the ``redlease run`` CLI wait in one queue and share one fencing sequence
on the same names.

    import redlease

    client = redlease.Client.connect("redis://127.0.0.1:6379")
    with client.lock("coupon-stock", ttl=10.0, wait=5.0) as guard:
        # Pass guard.fencing_token to the resource, so that it can refuse a stale write.
        ...

The lease is renewed in the background while the ``with`` block runs; if it is lost
anyway (the process was paused past its ttl, Redis unreachable, the key deleted),
``guard.lost`` (a ``threading.Event``) is set and ``guard.is_held()`` turns false, and
leaving the block raises ``redlease.Lost``. Blocking calls release the GIL.

Durations are seconds (``float``) or ``datetime.timedelta``; ``wait=None`` waits until
acquired, ``wait=0`` makes one attempt. Every call may raise a ``redlease.Error``.
"""

from __future__ import annotations

import asyncio
import atexit
import datetime
import functools
import inspect
import logging
import math
import os
import re
import string
import threading
import weakref
from typing import Any, Callable, NamedTuple, NoReturn, Optional, Sequence, Union

from . import _native
from ._errors import (
    AuthError,
    ConnectionError,
    Error,
    Forked,
    InvalidName,
    InvalidOption,
    Lost,
    NoQuorum,
    PermitsMismatch,
    RedisError,
    Released,
    ReplicationError,
    RuntimeFailure,
    ShutDown,
    Timeout,
    Unsupported,
    UpgradeError,
    WrongType,
)

__all__ = [
    "AsyncClient",
    "AsyncGuard",
    "AsyncLatch",
    "AuthError",
    "Client",
    "ConnectionError",
    "ConnectionState",
    "Error",
    "FencedStore",
    "Forked",
    "Guard",
    "InvalidName",
    "InvalidOption",
    "Latch",
    "Leader",
    "Lost",
    "NoQuorum",
    "Opened",
    "PermitsMismatch",
    "RedisError",
    "Released",
    "ReplicationError",
    "RuntimeFailure",
    "ShutDown",
    "Stats",
    "Timeout",
    "Unsupported",
    "UpgradeError",
    "WrongType",
    "locked",
]

Seconds = Union[float, int, datetime.timedelta]

DEFAULT_TTL: float = _native.DEFAULT_TTL
"""The ttl of a lease when none is given, in seconds (the Rust library's and the CLI's)."""
DEFAULT_WAIT: float = _native.DEFAULT_WAIT
"""How long an acquisition waits for a busy lock when not told, in seconds (the Rust
library's and the CLI's)."""

# At the interpreter's exit, every client of this process gives back its leases and queue
# places, and the binding's threads stop coming back into Python (see python/src/life.rs).
atexit.register(_native.at_exit)

__version__: str = _native.__version__
"""The version of the binding (the Rust library's)."""

_log = logging.getLogger("redlease")


def _seconds(value: Optional[Seconds], option: str, *, none_ok: bool) -> Optional[float]:
    if value is None:
        if none_ok:
            return None
        raise InvalidOption(f"invalid option `{option}`: a number of seconds is needed")
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{option} must be seconds (float) or a datetime.timedelta, not {type(value).__name__}")
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise InvalidOption(f"invalid option `{option}`: {value} is not a number of seconds >= 0")
    return float(value)


def _name(name: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"a lock name is a str, not {type(name).__name__}")
    return name


def _count(value: int, option: str) -> int:
    """A count of permits, arrivals or parties (the library refuses 0)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{option} is a count (int), not {type(value).__name__}")
    if not 0 <= value < 2**32:
        raise InvalidOption(f"invalid option `{option}`: {value} is not a count from 1 to {2**32 - 1}")
    return value


def _read_pem(path: Optional[Union[str, "os.PathLike[str]"]], option: str) -> Optional[bytes]:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InvalidOption(f"invalid option `{option}`: cannot read {path!s}: {e.strerror}") from e


def _options(url: Union[str, Sequence[str]], prefix: Optional[str], connect_timeout: Optional[Seconds],
             response_timeout: Optional[Seconds], tls_ca: Any, tls_cert: Any, tls_key: Any,
             holder_note: Optional[str], fence_keep: Optional[Seconds]) -> Any:
    urls = [url] if isinstance(url, str) else list(url)
    if not all(isinstance(u, str) for u in urls):
        raise TypeError("a Redis URL is a str (or a list of them for a quorum)")
    return _native.Options(
        urls, prefix, _seconds(connect_timeout, "connect_timeout", none_ok=True),
        _seconds(response_timeout, "response_timeout", none_ok=True),
        _read_pem(tls_ca, "tls_ca"), _read_pem(tls_cert, "tls_cert"), _read_pem(tls_key, "tls_key"),
        holder_note, _seconds(fence_keep, "fence_keep", none_ok=True),
    )


class Leader(NamedTuple):
    """Who leads an election."""

    note: str
    """What the leader campaigned with (or proclaimed last)."""
    term: int
    """The leader's term: its lease's fencing token."""
    remaining: float
    """Seconds its lease runs unless renewed."""


def _leader(raw: Optional[tuple]) -> Optional[Leader]:
    return None if raw is None else Leader(*raw)


class Opened(NamedTuple):
    """How the counts of a latch's round ended, as ``wait_open`` saw it."""

    counted_down: int
    """Counts their party counted down (or released)."""
    expired: int
    """Counts whose lease expired instead: their party died or lost Redis for longer than
    the ttl, so its work may be unfinished."""

    @property
    def is_broken(self) -> bool:
        """Whether any count expired rather than being counted down."""
        return self.expired > 0


class Stats(NamedTuple):
    """A client's counters, for diagnostics (``Client.stats()``)."""

    waiting: int
    """Acquisitions waiting for a busy lock right now."""
    renewal_round_trips: int
    """Renewal round trips sent so far (one per sweep, however many leases it renewed)."""
    renewal_tasks_started: int
    """How many times the renewal task was started."""


class ConnectionState(NamedTuple):
    """Whether a client's Redis answers now, judged by the latest request to each node
    (``Client.connection_state()``). It says nothing about leases: a lease is lost only
    when its own renewal finds it gone or it runs out, and each guard says so itself
    (``guard.lost``); while suspended, held leases stay valid until their time runs out
    and their renewals keep trying."""

    state: str
    """``"connected"`` (every node answered its latest request), ``"degraded"`` (over a
    quorum: some nodes did not, but a majority did) or ``"suspended"`` (Redis does not
    answer; over a quorum: a majority of the nodes do not)."""
    down: Optional[int] = None
    """When degraded: the nodes whose latest request went unanswered (else ``None``)."""
    nodes: Optional[int] = None
    """When degraded: the quorum's nodes (else ``None``)."""

    @property
    def is_usable(self) -> bool:
        """Whether requests can succeed now (connected, or degraded with a majority up)."""
        return self.state != "suspended"


class _Loss:
    """The ``lost`` event of a guard (an ``asyncio.Event`` of ``loop`` for asyncio code,
    else a ``threading.Event``) and the hooks run when it is set."""

    def __init__(self, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        self._loop = loop
        self.event: Any = threading.Event() if loop is None else asyncio.Event()
        self._set = threading.Event()
        self._hooks: list = []
        self._lock = threading.Lock()

    def is_set(self) -> bool:
        return self._set.is_set()

    def fire(self) -> None:
        with self._lock:
            self._set.set()
            hooks, self._hooks = self._hooks, []
        if self._loop is None:
            self.event.set()
        else:
            try:
                self._loop.call_soon_threadsafe(self.event.set)
            except RuntimeError:
                pass  # the loop is closed
        for hook in hooks:
            hook()

    def add_hook(self, hook: Callable[[], None]) -> None:
        with self._lock:
            if not self._set.is_set():
                self._hooks.append(hook)
                return
        hook()


class _GuardBase:
    def __init__(self, native: Any, loss: _Loss) -> None:
        self._native = native
        self._loss = loss

    @property
    def fencing_token(self) -> int:
        """The fencing token of this hold: larger than every earlier hold's of the same
        lock (and shared with every other redlease client, Rust or CLI). Give it to the
        resource, which refuses writes older than the largest token it has seen."""
        return self._native.fencing_token

    @property
    def fencing_tokens(self) -> list:
        """``(name, token)`` of each lock held (several for a multi-lock)."""
        return self._native.fencing_tokens

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._native.name

    @property
    def lost(self) -> Any:
        """Set when the lease is lost, never by a release: a ``threading.Event`` (set from
        another thread) on a ``Guard``, an ``asyncio.Event`` (``await guard.lost.wait()``)
        on an ``AsyncGuard``."""
        return self._loss.event

    def detach(self) -> str:
        """Ends this guard without giving the lease back and returns its handle, for
        ``client.adopt(handle)`` in another process or thread (a secret: it holds the
        owner token). Nobody renews the lease until it is adopted; only a lock's lease can
        be detached."""
        return self._native.detach()

    @property
    def remaining(self) -> float:
        """Seconds until the lease's validity ends unless renewed (0.0 once lost or
        released)."""
        return self._native.remaining

    def is_held(self) -> bool:
        """Whether the lease is still ours, without asking Redis."""
        return self._native.is_held()

    def __repr__(self) -> str:
        return repr(self._native)


class Guard(_GuardBase):
    """A hold of a lock, permit, read or write lock, multi-lock or leadership."""

    def extend(self, ttl: Seconds) -> None:
        """Sets the lease's ttl to ``ttl`` from now. Raises ``Lost`` if it was lost."""
        self._native.extend(_seconds(ttl, "ttl", none_ok=False))

    def owned(self) -> bool:
        """Asks Redis whether it still names this hold's owner (``is_held()`` does not
        ask); false once the lease expired, was taken or released."""
        return self._native.owned()

    def release(self) -> None:
        """Gives the hold back. Raises ``Lost`` if the lease was lost meanwhile; a second
        call does nothing."""
        self._native.release()

    def resign(self) -> None:
        """Ends a leadership (the same as ``release``)."""
        self._native.release()

    def count_down(self) -> None:
        """Counts a latch's count down (the same as ``release``)."""
        self._native.release()

    def proclaim(self, note: str) -> None:
        """Replaces a leadership's note (what ``leader()`` and observers see) without
        losing its term. Raises ``Lost`` when it no longer leads, ``Unsupported`` on a
        guard that is not a leadership."""
        self._native.proclaim(note)

    @property
    def term(self) -> int:
        """A leadership's term (its fencing token)."""
        return self._native.fencing_token

    def __enter__(self) -> "Guard":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        _release_on_exit(self._native.release, exc_type)


def _release_on_exit(release: Callable[[], None], exc_type: Any) -> None:
    if exc_type is None:
        release()
        return
    try:
        release()
    except Error:
        pass  # the body's exception is the one to see


class _Request:
    """What an acquisition asks for, checked when it is made (before any Redis call)."""

    def __init__(self, client: Any, kind: str, names: Sequence[str], ttl: Optional[Seconds],
                 wait: Optional[Seconds], permits: int = 1, note: str = "", take: int = 1,
                 max_hold: Optional[Seconds] = None, min_replicas: Optional[tuple] = None,
                 renew: bool = True) -> None:
        self._client = client
        if isinstance(take, bool) or not isinstance(take, int):
            raise TypeError(f"take is a number of permits (int), not {type(take).__name__}")
        if take < 1:
            raise InvalidOption(f"invalid option `take`: {take} permits; at least 1")
        if min_replicas is not None:
            replicas, timeout = min_replicas
            min_replicas = (replicas, _seconds(timeout, "min_replicas", none_ok=False))

        def request(wait: Optional[Seconds]) -> Any:
            return _native.Request(
                kind, [_name(n) for n in names], _seconds(ttl, "ttl", none_ok=False),
                _seconds(wait, "wait", none_ok=True), permits, note, take,
                _seconds(max_hold, "max_hold", none_ok=True), min_replicas, bool(renew),
            )

        self._request = request(wait)
        self._once = request(0)
        # Locks re-enter for their owner (a thread, an asyncio task); permits, counts and
        # campaigns are each a hold of their own.
        self._reentrant = kind in ("lock", "multi_lock", "read", "write")

    def _owner(self) -> Any:
        return self._client._owner() if self._reentrant else None


class _Acquisition(_Request):
    """An acquisition to make: ``acquire()``, or ``with`` it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held = threading.local()

    def acquire(self) -> Guard:
        """Acquires (waiting as told) and returns the guard. Raises ``Timeout`` when busy
        for the whole wait."""
        loss = _Loss()
        native = self._client._native.acquire(self._request, loss.fire, self._owner())
        return Guard(native, loss)

    def __enter__(self) -> Guard:
        guard = self.acquire()
        stack = getattr(self._held, "stack", None)
        if stack is None:
            stack = self._held.stack = []
        stack.append(guard)
        return guard

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        guard = self._held.stack.pop()
        _release_on_exit(guard.release, exc_type)


class _RwLockBase:
    _acquisition: Any

    def __init__(self, client: Any, name: str) -> None:
        self._client, self._name = client, name

    def read(self, ttl: Seconds = DEFAULT_TTL, wait: Optional[Seconds] = DEFAULT_WAIT) -> Any:
        """A read hold (shared with other readers)."""
        return self._acquisition(self._client, "read", [self._name], ttl, wait)

    def write(self, ttl: Seconds = DEFAULT_TTL, wait: Optional[Seconds] = DEFAULT_WAIT) -> Any:
        """The write hold (alone)."""
        return self._acquisition(self._client, "write", [self._name], ttl, wait)


class RwLock(_RwLockBase):
    """A read-write lock: many readers or one writer."""

    _acquisition = _Acquisition


class Election:
    """A leader election: one leader at a time, with a term that only rises."""

    def __init__(self, client: "Client", name: str) -> None:
        self._client, self._name = client, _name(name)

    def campaign(self, note: str = "", ttl: Seconds = DEFAULT_TTL, wait: Optional[Seconds] = None) -> Guard:
        """Waits to lead (by default until elected); the guard's ``term`` is the term and
        ``resign()`` ends it."""
        return _Acquisition(self._client, "election", [self._name], ttl, wait, note=note).acquire()

    def leader(self) -> Optional[Leader]:
        """The current leader, or ``None``."""
        return _leader(self._client._native.leader(self._name))

    def observe(self):
        """Yields the current leader (or ``None``), then each change; blocks between."""
        changes = self._client._native.observe(self._name)
        while True:
            yield _leader(changes.next())

    def keep_leading(self, note: str, work: Callable[[Guard], Any], *, ttl: Seconds = DEFAULT_TTL,
                     wait: Optional[Seconds] = None) -> NoReturn:
        """Leads again and again (Rust's ``Election::keep_leading``): campaigns with ``note``,
        calls ``work(leadership)`` while leading, and when ``work`` returns resigns and
        campaigns again, queueing behind the other candidates. ``work`` runs in this thread
        and cannot be stopped from outside: it watches ``leadership.lost`` (a
        ``threading.Event``) and returns when it is set; the leadership it was given (its
        ``term`` for fencing, ``proclaim(note)``) is valid until then. A lost leadership is
        logged (``logging``, warning) and is no error here: a ``Lost`` that ``work`` raises
        once its leadership is gone (a ``proclaim`` that found it gone) counts as the loss,
        and the next campaign starts at once. Never returns: it raises the exception of
        ``work`` (after resigning), or a campaign's (``Timeout`` when ``wait`` runs out, a
        ``ConnectionError`` that outlasts it...)."""
        campaign = _Acquisition(self._client, "election", [self._name], ttl, wait, note=note)
        while True:
            leadership = campaign.acquire()
            try:
                done = work(leadership)
                if inspect.isawaitable(done):
                    # Never awaited, it would campaign again at once, for ever.
                    getattr(done, "close", lambda: None)()
                    raise TypeError("the work of Election.keep_leading is not async: lead with a "
                                    "redlease.AsyncClient's election")
            except Lost as e:
                deposed = not leadership.is_held()
                _release_on_exit(leadership.release, type(e))
                if not deposed:
                    raise
                _deposed(self._name, leadership)
                continue
            except BaseException as e:
                _release_on_exit(leadership.release, type(e))
                raise
            try:
                leadership.release()
            except Lost:
                _deposed(self._name, leadership)


def _deposed(name: str, leadership: Any) -> None:
    _log.warning("leadership of election `%s` lost in term %d; campaigning again", name, leadership.term)


class _LatchBase:
    _acquisition: Any

    def __init__(self, client: Any, name: str, ttl: Seconds) -> None:
        self._client, self._name, self._ttl = client, _name(name), ttl
        self._counting = self._acquisition(client, "latch", [name], ttl, None)

    def _look(self, wait: Optional[Seconds]) -> Any:
        return _native.Request("latch", [self._name], _seconds(self._ttl, "ttl", none_ok=False),
                               _seconds(wait, "wait", none_ok=True))

    def _step(self, what: str, n: int, option: str, wait: Optional[Seconds] = 0) -> tuple:
        """The native call's arguments for step ``what`` of ``n`` arrivals or parties."""
        return (self._look(wait), what, _count(n, option))


class Latch(_LatchBase):
    """A count-down latch whose counts are leases: parties count up and down, waiters
    wake when none is left. A party that dies stops renewing its count, which expires
    one ttl later and stops holding the others up (``wait_open`` reports it as expired,
    never as counted down)."""

    _acquisition = _Acquisition

    def count_up(self) -> Guard:
        """Registers one more outstanding count, renewed until ``count_down()`` (or the end
        of a ``with`` block)."""
        return self._counting.acquire()

    def count(self) -> int:
        """The live outstanding counts now (expired ones reclaimed first)."""
        return self._client._native.latch(self._look(0), "count")[0]

    def wait_open(self, wait: Optional[Seconds] = DEFAULT_WAIT) -> Opened:
        """Waits up to ``wait`` seconds (``None``: for ever) until no live count of the
        round open now remains; raises ``Timeout`` when the wait runs out first."""
        return Opened(*self._client._native.latch(self._look(wait), "wait_open"))

    def expect(self, arrivals: int) -> int:
        """Presets ``arrivals`` counts that the round open now waits for (opening one if
        none is), before anyone counted up: each later ``count_up`` takes one of them back,
        and the round cannot end while any is still expected, so a coordinator can wait
        for workers that have not started yet. Returns the arrivals now expected. An
        expected arrival is no lease: one that never comes holds the round open until the
        waiters' ``wait`` runs out. Not retried when Redis cannot be asked (the arrivals
        may or may not have been added)."""
        return self._client._native.latch(*self._step("expect", arrivals, "arrivals"))[0]

    def try_expect(self, arrivals: int) -> bool:
        """As ``expect``, only when no round is open (no count outstanding, no arrival
        expected): whether the arrivals were preset. Of several parties that all try, one
        presets the round and the others join it."""
        return self._client._native.latch(*self._step("try_expect", arrivals, "arrivals"))

    def barrier(self, parties: int, wait: Optional[Seconds] = DEFAULT_WAIT) -> Opened:
        """A barrier of ``parties``: returns once ``parties`` callers (this one included)
        have arrived, waiting up to ``wait`` seconds (``None``: for ever; ``Timeout`` when
        it runs out first), and says how their counts ended. The first to arrive presets
        the round (``try_expect``); each counts up and down at once and waits for the round
        to end. A party that dies between its arrival and its count down is reported as
        expired one ttl later (``Opened.is_broken``). Reusable: the arrivals after it opened
        form the next round."""
        return Opened(*self._client._native.latch(*self._step("barrier", parties, "parties", wait)))


class _ClientBase:
    """The primitives, the same for threads and asyncio; the subclass names its types."""

    _acquisition: Any
    _rwlock: Any
    _election: Any

    def __init__(self, native: Any) -> None:
        self._native = native
        self._owners = self._new_owners()

    @staticmethod
    def _new_owners() -> Any:
        return threading.local()

    def lock(self, name: str, ttl: Seconds = DEFAULT_TTL, wait: Optional[Seconds] = DEFAULT_WAIT, *,
             max_hold: Optional[Seconds] = None, min_replicas: Optional[tuple] = None,
             renew: bool = True) -> Any:
        """The lock ``name``: ``with client.lock(name) as guard:`` (``async with`` on an
        ``AsyncClient``, or ``await client.lock(name).run(work)``) holds it for the block,
        its lease of ``ttl`` seconds renewed meanwhile; waits ``wait`` seconds for it
        (``None``: until acquired, ``0``: one attempt), then raises ``Timeout``. Waiters
        are served in FIFO order. The same thread (asyncio task) re-enters a lock it holds:
        the nested guard shares the lease and fencing token, and the lock is given back
        when the outermost guard is. ``max_hold`` stops renewing that long after the
        acquisition (a stuck holder cannot hold for ever); ``min_replicas=(n, timeout)``
        waits for ``n`` replicas to acknowledge the lock (``ReplicationError`` otherwise);
        ``renew=False`` holds a lease of ``ttl`` that nobody renews (it ends by itself,
        ``release()`` may end it earlier). ``semaphore`` and ``multi_lock`` take
        ``max_hold`` and ``renew`` too."""
        return self._acquisition(self, "lock", [name], ttl, wait, max_hold=max_hold,
                                 min_replicas=min_replicas, renew=renew)

    def semaphore(self, name: str, permits: int, ttl: Seconds = DEFAULT_TTL,
                  wait: Optional[Seconds] = DEFAULT_WAIT, *, take: int = 1,
                  max_hold: Optional[Seconds] = None, renew: bool = True) -> Any:
        """``take`` (default one) of the ``permits`` permits of semaphore ``name``, held as
        one lease with one fencing token. Waiters are served in FIFO order while they fit:
        a request for several at the head of the queue is not starved by smaller ones
        behind it. ``take`` of 0 or above ``permits`` raises ``InvalidOption``."""
        return self._acquisition(self, "semaphore", [name], ttl, wait, permits=permits, take=take,
                                 max_hold=max_hold, renew=renew)

    def rwlock(self, name: str) -> Any:
        """The read-write lock ``name``: ``.read(...)`` or ``.write(...)``."""
        return self._rwlock(self, name)

    def multi_lock(self, names: Sequence[str], ttl: Seconds = DEFAULT_TTL,
                   wait: Optional[Seconds] = DEFAULT_WAIT, *, max_hold: Optional[Seconds] = None,
                   renew: bool = True) -> Any:
        """All of ``names`` at once (taken in a fixed order, so no deadlock)."""
        return self._acquisition(self, "multi_lock", list(names), ttl, wait, max_hold=max_hold, renew=renew)

    def election(self, name: str) -> Any:
        """The leader election ``name``."""
        return self._election(self, name)

    def latch(self, name: str, ttl: Seconds = DEFAULT_TTL) -> Any:
        """The count-down latch ``name``, whose counts are leases of ``ttl`` seconds."""
        return self._latch(self, name, ttl)

    def stats(self) -> "Stats":
        """The client's counters (no Redis call)."""
        return Stats(*self._native.stats())

    def _resize(self, name: str, permits: int) -> tuple:
        """The native call's arguments of ``resize_semaphore``."""
        return (_name(name), _count(permits, "permits"))


class Client(_ClientBase):
    """A client of redlease for threads. Connect with ``Client.connect(url)``."""

    _acquisition = _Acquisition
    _rwlock = RwLock
    _election = Election
    _latch = Latch

    @classmethod
    def connect(cls, url: Union[str, Sequence[str]], *, prefix: Optional[str] = None,
                connect_timeout: Optional[Seconds] = None, response_timeout: Optional[Seconds] = None,
                tls_ca: Any = None, tls_cert: Any = None, tls_key: Any = None,
                holder_note: Optional[str] = None, fence_keep: Optional[Seconds] = None) -> "Client":
        """Connects, waiting for the connection; raises ``ConnectionError`` (or
        ``AuthError``) when it cannot. A client made before ``os.fork()`` connects afresh
        in the child on its first call.

        ``url`` is ``redis://[user:password@]host:port[/db]``, ``rediss://`` for TLS,
        ``redis+sentinel://host:port[,host:port...]/master-name`` for a primary found through
        Sentinel (``rediss+sentinel://`` over TLS, with ``tls_ca``/``tls_cert``/``tls_key``
        for the sentinels and the primary), ``redis+cluster://host:port[,host:port...]`` for a Redis Cluster, or a list
        of URLs for a quorum (Redlock) of independent primaries. ``prefix`` (default
        ``"redlease:"``) starts the keys of every lock: give the one your Rust services
        (``ClientBuilder::prefix``) and ``redlease run --prefix`` use, so that all of them wait
        in one queue on the same names. ``connect_timeout`` and ``response_timeout`` bound
        connecting and each reply (seconds); ``tls_ca`` (a PEM file of the roots to trust),
        ``tls_cert`` and ``tls_key`` (a client certificate and its key, PEM files) configure
        TLS; ``holder_note`` is recorded beside every lock held, for operators;
        ``fence_keep`` (seconds, 1 to a year; default an hour) is how long a name's fencing
        counter is kept past the server's clock after a grant, the largest step back of the
        server's clock its tokens survive (give every client of a name the same)."""
        return cls(_native.Client.connect(_options(url, prefix, connect_timeout, response_timeout,
                                                   tls_ca, tls_cert, tls_key, holder_note, fence_keep)))

    @classmethod
    def from_url(cls, url: Union[str, Sequence[str]], *, prefix: Optional[str] = None,
                 connect_timeout: Optional[Seconds] = None, response_timeout: Optional[Seconds] = None,
                 tls_ca: Any = None, tls_cert: Any = None, tls_key: Any = None,
                 holder_note: Optional[str] = None, fence_keep: Optional[Seconds] = None) -> "Client":
        """A client that connects on its first call (no I/O now): for a client made at
        import. The options are ``connect``'s."""
        return cls(_native.Client.from_url(_options(url, prefix, connect_timeout, response_timeout,
                                                    tls_ca, tls_cert, tls_key, holder_note, fence_keep)))

    def shutdown(self) -> None:
        """Gives back every lease this client holds and withdraws its waiting requests
        (done by itself at the interpreter's exit)."""
        self._native.shutdown()

    def _owner(self) -> Any:
        owner = getattr(self._owners, "owner", None)
        if owner is None:
            owner = self._owners.owner = _native.Owner()
        return owner

    def adopt(self, handle: str) -> Guard:
        """Takes over the lock lease a guard's ``detach()`` returned (from any process)
        and renews it; raises ``Lost`` when the lease is gone (released, expired before it
        was adopted, or another owner holds the lock: nothing ran under it here)."""
        loss = _Loss()
        return Guard(self._native.adopt(handle), loss)

    def resize_semaphore(self, name: str, permits: int) -> Optional[int]:
        """Sets semaphore ``name``'s permit count to ``permits`` while it may be held or
        waited for (Rust's ``Semaphore::resize``) and returns the count in force before
        (``None`` when none was stored: the semaphore was idle). A raised count hands the
        new permits to the oldest waiters at once; a lowered one revokes nobody, and grants
        nothing until the permits in use are below it. The count stored is authoritative
        for a day at least (``redlease::RESIZE_KEEP``) and while the semaphore is in use:
        acquisitions asking another count acquire against it instead of raising
        ``PermitsMismatch``. ``Unsupported`` over a quorum."""
        return self._native.resize_semaphore(*self._resize(name, permits))

    def connection_state(self) -> ConnectionState:
        """Whether the client's Redis answers now, as the latest request to each node found
        (no Redis call; a client that did not connect in this process yet connects first).
        ``ConnectionState`` says nothing about leases: each guard reports its own."""
        return ConnectionState(*self._native.connection_state())

    def connection_states(self):
        """Yields the client's connection state now, then each change; blocks between.
        While it waits, every node is sent a ``PING`` each second without a change, so an
        idle client notices a Redis that stopped answering within about a second and the
        response timeout."""
        states = self._native.connection_states()
        while True:
            yield ConnectionState(*states.next())

    def inspect(self, name: str) -> dict:
        """What Redis holds for ``name`` (any primitive): ``held``, ``primitive``,
        ``holders`` and ``waiters`` (with fencing tokens, time left, holder details),
        ``fencing_counter``. Every field: ``redlease inspect``'s."""
        return self._native.inspect(_name(name))

    def force_release(self, name: str) -> dict:
        """Deletes the holds of ``name`` whoever holds them (an operator's tool: the holder
        keeps working until its next renewal fails) and returns what was there."""
        return self._native.inspect(_name(name), True)


class FencedStore:
    """Values in a Redis that refuse a holder that outlived its lease: a write is applied
    only with a fencing token at least as large as the largest one accepted for its key
    (the token is kept beside the value, in the same cluster slot). The same store as the
    Rust library's ``redlease::resource::fenced_set``.

        store = redlease.FencedStore.connect("redis://127.0.0.1:6379")
        with client.lock("stock") as guard:
            if store.set("coupon:stock", b"99", guard.fencing_token) is not None:
                ...  # refused: a newer holder wrote, this lease ran out
    """

    def __init__(self, native: Any) -> None:
        self._native = native

    @classmethod
    def connect(cls, url: str) -> "FencedStore":
        """Connects to the Redis at ``url`` (any Redis, not necessarily the locks')."""
        return cls(_native.FencedStore.connect(url))

    def set(self, key: str, value: Union[bytes, str, int], token: int) -> Optional[int]:
        """Writes ``value`` at ``key`` if ``token`` is not older than the largest token
        accepted there; ``None`` when written, else the newer token that refused it."""
        if isinstance(value, str):
            value = value.encode()
        elif isinstance(value, int) and not isinstance(value, bool):
            value = str(value).encode()
        if not isinstance(value, bytes):
            raise TypeError(f"a fenced value is bytes, str or int, not {type(value).__name__}")
        return self._native.set(key, value, token)


# asyncio

def _bridge(start: Callable[[Callable[[Any, Any], None]], Any]) -> "asyncio.Future[Any]":
    """An awaitable of a native background operation: ``start(callback)`` starts it and
    returns its cancel handle; cancelling the awaitable cancels the operation."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(value: Any, error: Any) -> None:
        if future.done():
            return  # cancelled: a guard dropped here is given back by its finalizer
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def callback(value: Any, error: Any) -> None:
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:
            pass  # the loop is closed

    handle = start(callback)

    def on_done(done: "asyncio.Future[Any]") -> None:
        if done.cancelled():
            handle.cancel()

    future.add_done_callback(on_done)
    return future


class AsyncGuard(_GuardBase):
    """A hold for asyncio code; as ``Guard`` with awaitable ``extend`` and ``release``."""

    async def extend(self, ttl: Seconds) -> None:
        """Sets the lease's ttl to ``ttl`` from now. Raises ``Lost`` if it was lost."""
        secs = _seconds(ttl, "ttl", none_ok=False)
        await _bridge(lambda cb: self._native.extend_with(secs, cb))

    async def owned(self) -> bool:
        """Asks Redis whether it still names this hold's owner (as ``Guard.owned``)."""
        return await _bridge(self._native.owned_with)

    async def release(self) -> None:
        """Gives the hold back. Raises ``Lost`` if the lease was lost meanwhile."""
        await _bridge(self._native.release_with)

    async def resign(self) -> None:
        """Ends a leadership (the same as ``release``)."""
        await self.release()

    async def count_down(self) -> None:
        """Counts a latch's count down (the same as ``release``)."""
        await self.release()

    async def proclaim(self, note: str) -> None:
        """Replaces a leadership's note without losing its term (as ``Guard.proclaim``)."""
        await _bridge(lambda cb: self._native.proclaim_with(note, cb))

    @property
    def term(self) -> int:
        """A leadership's term (its fencing token)."""
        return self._native.fencing_token

    async def __aenter__(self) -> "AsyncGuard":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await _arelease_on_exit(self, exc_type)


async def _arelease_on_exit(guard: AsyncGuard, exc_type: Any) -> None:
    if exc_type is None:
        await guard.release()
        return
    try:
        await guard.release()
    except Error:
        pass


def _work_task(client: Any, guard: AsyncGuard, start: Callable[[AsyncGuard], Any]) -> "asyncio.Task[Any]":
    """The awaitable ``start(guard)`` makes, in a task of its own that acts for the current
    task's owner (it re-enters what this task holds) and is cancelled when the lease of
    ``guard`` is lost."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(start(guard))
    client._owners[task] = client._owner()

    def cancel() -> None:
        try:
            loop.call_soon_threadsafe(task.cancel)
        except RuntimeError:
            pass

    guard._loss.add_hook(cancel)
    return task


class _AsyncAcquisition(_Request):
    """An acquisition for asyncio: ``await acquire()``, ``async with`` it, or ``run``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: dict = {}

    async def acquire(self) -> AsyncGuard:
        """Acquires (waiting as told) and returns the guard; cancelling it stops waiting."""
        return await self._acquire(self._request)

    async def _acquire(self, request: Any) -> "AsyncGuard":
        loss = _Loss(asyncio.get_running_loop())
        owner = self._owner()
        native = await _bridge(lambda cb: self._client._native.acquire_with(request, cb, loss.fire, owner))
        return AsyncGuard(native, loss)

    async def __aenter__(self) -> AsyncGuard:
        guard = await self.acquire()
        self._held.setdefault(asyncio.current_task(), []).append(guard)
        return guard

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        task = asyncio.current_task()
        stack = self._held[task]
        guard = stack.pop()
        if not stack:
            del self._held[task]
        await _arelease_on_exit(guard, exc_type)

    async def run(self, work: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Acquires, runs ``await work(*args, **kwargs)`` in a task of its own and
        releases; if the lease is lost meanwhile, the task is cancelled and ``Lost`` is
        raised (what ``Lock::run`` does in Rust)."""
        return await self._run(lambda _guard: work(*args, **kwargs))

    async def try_run(self, work: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``run`` with one attempt instead of a wait: ``None`` when the lock is busy (the
        work does not run), else the work's result."""
        try:
            guard = await self._acquire(self._once)
        except Timeout:
            return None
        return await self._run(lambda _guard: work(*args, **kwargs), guard)

    async def _run(self, start: Callable[[AsyncGuard], Any], guard: Optional[AsyncGuard] = None) -> Any:
        """``run`` of the awaitable ``start(guard)`` makes (the guard acquired when not given)."""
        if guard is None:
            guard = await self.acquire()
        task = _work_task(self._client, guard, start)
        try:
            result = await task
        except asyncio.CancelledError:
            if guard._loss.is_set() and task.cancelled():
                await _arelease_on_exit(guard, Lost)
                raise Lost(f"lock `{guard.name}` was lost during the work, which was cancelled") from None
            await _arelease_on_exit(guard, asyncio.CancelledError)
            raise
        except BaseException as e:
            await _arelease_on_exit(guard, type(e))
            raise
        await guard.release()
        return result


class AsyncRwLock(_RwLockBase):
    """A read-write lock for asyncio."""

    _acquisition = _AsyncAcquisition


class AsyncElection:
    """A leader election for asyncio."""

    def __init__(self, client: "AsyncClient", name: str) -> None:
        self._client, self._name = client, _name(name)

    async def campaign(self, note: str = "", ttl: Seconds = DEFAULT_TTL,
                       wait: Optional[Seconds] = None) -> AsyncGuard:
        """Waits to lead; ``resign()`` on the guard ends it."""
        return await _AsyncAcquisition(self._client, "election", [self._name], ttl, wait, note=note).acquire()

    async def leader(self) -> Optional[Leader]:
        """The current leader, or ``None``."""
        raw = await _bridge(lambda cb: self._client._native.leader_with(self._name, cb))
        return _leader(raw)

    async def observe(self):
        """Yields the current leader (or ``None``), then each change."""
        changes = self._client._native.observe(self._name)
        while True:
            yield _leader(await _bridge(changes.next_with))

    async def keep_leading(self, note: str, work: Callable[[AsyncGuard], Any], *,
                           ttl: Seconds = DEFAULT_TTL, wait: Optional[Seconds] = None) -> NoReturn:
        """Leads again and again (as ``Election.keep_leading``): campaigns with ``note``, runs
        ``await work(leadership)`` in a task of its own while leading (as ``run``: the task
        is cancelled the moment leadership is lost), and when leadership is lost or the work
        returns, resigns and campaigns again. The work may ``await leadership.proclaim(note)``;
        a ``Lost`` it raises once its leadership is gone counts as the loss. Never returns:
        it raises the work's exception (after resigning) or a campaign's; cancelling it
        cancels the work and resigns."""
        campaign = _AsyncAcquisition(self._client, "election", [self._name], ttl, wait, note=note)

        async def lead(leadership: AsyncGuard) -> Any:
            # A work that returns no awaitable raises TypeError here, in the task.
            return await work(leadership)

        while True:
            leadership = await campaign.acquire()
            task = _work_task(self._client, leadership, lead)
            try:
                await task
            except asyncio.CancelledError:
                deposed = leadership._loss.is_set() and task.cancelled()
                await _arelease_on_exit(leadership, asyncio.CancelledError)
                if not deposed:
                    raise
                _deposed(self._name, leadership)
                continue
            except Lost as e:
                deposed = not leadership.is_held()
                await _arelease_on_exit(leadership, type(e))
                if not deposed:
                    raise
                _deposed(self._name, leadership)
                continue
            except BaseException as e:
                await _arelease_on_exit(leadership, type(e))
                raise
            try:
                await leadership.release()
            except Lost:
                _deposed(self._name, leadership)


class AsyncLatch(_LatchBase):
    """A count-down latch for asyncio (see ``Latch``)."""

    _acquisition = _AsyncAcquisition

    async def count_up(self) -> AsyncGuard:
        """Registers one more outstanding count; ``await count.count_down()`` ends it."""
        return await self._counting.acquire()

    async def count(self) -> int:
        """The live outstanding counts now."""
        request = self._look(0)
        return (await _bridge(lambda cb: self._client._native.latch_with(request, "count", cb)))[0]

    async def wait_open(self, wait: Optional[Seconds] = DEFAULT_WAIT) -> Opened:
        """Waits until no live count of the round open now remains (as ``Latch.wait_open``)."""
        request = self._look(wait)
        return Opened(*await _bridge(lambda cb: self._client._native.latch_with(request, "wait_open", cb)))

    async def _latch(self, request: Any, what: str, n: int) -> Any:
        return await _bridge(lambda cb: self._client._native.latch_with(request, what, cb, n))

    async def expect(self, arrivals: int) -> int:
        """Presets ``arrivals`` counts the round open now waits for (as ``Latch.expect``)."""
        return (await self._latch(*self._step("expect", arrivals, "arrivals")))[0]

    async def try_expect(self, arrivals: int) -> bool:
        """``expect`` only when no round is open: whether it preset (as ``Latch.try_expect``)."""
        return await self._latch(*self._step("try_expect", arrivals, "arrivals"))

    async def barrier(self, parties: int, wait: Optional[Seconds] = DEFAULT_WAIT) -> Opened:
        """Returns once ``parties`` callers have arrived (as ``Latch.barrier``)."""
        return Opened(*await self._latch(*self._step("barrier", parties, "parties", wait)))


class AsyncClient(_ClientBase):
    """A client of redlease for asyncio: ``client = await AsyncClient.connect(url)``."""

    _acquisition = _AsyncAcquisition
    _rwlock = AsyncRwLock
    _election = AsyncElection
    _latch = AsyncLatch

    @staticmethod
    def _new_owners() -> Any:
        return weakref.WeakKeyDictionary()

    def _owner(self) -> Any:
        task = asyncio.current_task()
        owner = self._owners.get(task)
        if owner is None:
            owner = self._owners[task] = _native.Owner()
        return owner

    async def shutdown(self) -> None:
        """Gives back every lease this client holds and withdraws its waiting requests
        (done by itself at the interpreter's exit)."""
        await asyncio.get_running_loop().run_in_executor(None, self._native.shutdown)

    async def adopt(self, handle: str) -> AsyncGuard:
        """Takes over the lock lease a guard's ``detach()`` returned (as ``Client.adopt``)."""
        loss = _Loss(asyncio.get_running_loop())
        return AsyncGuard(await _bridge(lambda cb: self._native.adopt_with(handle, cb)), loss)

    async def inspect(self, name: str) -> dict:
        """What Redis holds for ``name`` (as ``Client.inspect``)."""
        name = _name(name)
        return await _bridge(lambda cb: self._native.inspect_with(name, cb))

    async def force_release(self, name: str) -> dict:
        """Deletes the holds of ``name`` (as ``Client.force_release``)."""
        name = _name(name)
        return await _bridge(lambda cb: self._native.inspect_with(name, cb, True))

    async def resize_semaphore(self, name: str, permits: int) -> Optional[int]:
        """Sets semaphore ``name``'s permit count to ``permits`` and returns the count in
        force before, or ``None`` (as ``Client.resize_semaphore``)."""
        name, permits = self._resize(name, permits)
        return await _bridge(lambda cb: self._native.resize_semaphore_with(name, permits, cb))

    async def connection_state(self) -> ConnectionState:
        """Whether the client's Redis answers now (as ``Client.connection_state``; awaited,
        since a client made with ``from_url`` may connect first)."""
        return ConnectionState(*await _bridge(self._native.connection_state_with))

    async def connection_states(self):
        """Yields the client's connection state now, then each change (as
        ``Client.connection_states``)."""
        states = self._native.connection_states()
        while True:
            yield ConnectionState(*await _bridge(states.next_with))

    @classmethod
    async def connect(cls, url: Union[str, Sequence[str]], *, prefix: Optional[str] = None,
                      connect_timeout: Optional[Seconds] = None, response_timeout: Optional[Seconds] = None,
                      tls_ca: Any = None, tls_cert: Any = None, tls_key: Any = None,
                      holder_note: Optional[str] = None, fence_keep: Optional[Seconds] = None) -> "AsyncClient":
        """Connects (the options are ``Client.connect``'s)."""
        options = _options(url, prefix, connect_timeout, response_timeout, tls_ca, tls_cert, tls_key,
                           holder_note, fence_keep)
        return cls(await _bridge(lambda cb: _native.Client.connect_with(options, cb)))

    @classmethod
    def from_url(cls, url: Union[str, Sequence[str]], *, prefix: Optional[str] = None,
                 connect_timeout: Optional[Seconds] = None, response_timeout: Optional[Seconds] = None,
                 tls_ca: Any = None, tls_cert: Any = None, tls_key: Any = None,
                 holder_note: Optional[str] = None, fence_keep: Optional[Seconds] = None) -> "AsyncClient":
        """A client that connects on its first call (no I/O now, no event loop needed): for
        a client made at import, as in a FastAPI app. The options are ``Client.connect``'s."""
        return cls(_native.Client.from_url(_options(url, prefix, connect_timeout, response_timeout,
                                                    tls_ca, tls_cert, tls_key, holder_note, fence_keep)))


# the decorator

_FIELD_ROOT = re.compile(r"[.\[]")


def locked(client: Union[Client, AsyncClient], key: str, *, ttl: Seconds = DEFAULT_TTL,
           wait: Optional[Seconds] = DEFAULT_WAIT,
           guard: Optional[str] = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Runs the function under the lock named by ``key`` formatted with the call's
    arguments (``"coupon:{user_id}"``). A sync function needs a ``Client``, an ``async``
    one an ``AsyncClient`` (and runs as ``run`` does: cancelled if the lease is lost); a
    client made with ``from_url`` at import connects on the first call. ``guard`` names a
    parameter of the function that receives the guard (its ``fencing_token`` for the
    resource); callers leave it out. A placeholder that names no parameter, or a ``guard``
    that is none, raises ``TypeError`` when decorating."""
    _seconds(ttl, "ttl", none_ok=False)
    _seconds(wait, "wait", none_ok=True)
    fields = [field for _, field, _, _ in string.Formatter().parse(key) if field is not None]

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)
        if guard is not None and guard not in signature.parameters:
            raise TypeError(f"guard={guard!r}, but {fn.__qualname__} has no parameter {guard!r}")
        for field in fields:
            root = _FIELD_ROOT.split(field, 1)[0]
            if not root or root.isdigit() or root not in signature.parameters or root == guard:
                raise TypeError(
                    f"lock key {key!r} names {{{field}}}, but {fn.__qualname__} has no parameter {root!r}"
                )

        def name_for(args: tuple, kwargs: dict) -> str:
            bound = signature.bind_partial(*args, **kwargs) if guard else signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return key.format(**bound.arguments)

        def with_guard(held: Any, kwargs: dict) -> dict:
            return kwargs if guard is None else {**kwargs, guard: held}

        if inspect.iscoroutinefunction(fn):
            if not isinstance(client, AsyncClient):
                raise TypeError(f"{fn.__qualname__} is async: lock it with a redlease.AsyncClient")

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                acquisition = client.lock(name_for(args, kwargs), ttl=ttl, wait=wait)
                return await acquisition._run(lambda held: fn(*args, **with_guard(held, kwargs)))

            return async_wrapper
        if not isinstance(client, Client):
            raise TypeError(f"{fn.__qualname__} is not async: lock it with a redlease.Client")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with client.lock(name_for(args, kwargs), ttl=ttl, wait=wait) as held:
                return fn(*args, **with_guard(held, kwargs))

        return wrapper

    return decorate
