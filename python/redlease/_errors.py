"""The exceptions of redlease: every one is a ``redlease.Error``."""

import builtins


class Error(Exception):
    """Base of every redlease exception."""


class Timeout(Error, TimeoutError):
    """The lock (or permit, election) stayed busy for the whole wait."""


class Lost(Error):
    """The lease was lost: it expired or another owner holds it now. Work done under it
    may have overlapped with another holder's."""


class Released(Error):
    """The guard was already released."""


class ShutDown(Error):
    """The client was shut down while the lease was held."""


class ConnectionError(Error, builtins.ConnectionError):
    """Redis could not be reached (refused, dropped, timed out)."""


class AuthError(Error):
    """Redis refused the credentials."""


class NoQuorum(Error):
    """A majority of a quorum's nodes could not be reached or locked."""


class ReplicationError(Error):
    """Too few replicas acknowledged the lock in time."""


class InvalidName(Error, ValueError):
    """The name is empty, too long or otherwise not usable."""


class InvalidOption(Error, ValueError):
    """An option (ttl, wait, permits...) is out of range."""


class WrongType(Error):
    """The key holds another primitive of the same name."""


class PermitsMismatch(Error):
    """The semaphore is in use with another number of permits."""


class UpgradeError(Error):
    """A read hold cannot become a write hold (or a nested write cannot downgrade)."""


class Unsupported(Error):
    """The server or deployment cannot do this."""


class RedisError(Error):
    """Redis answered with an error."""


class Forked(Error):
    """The guard (or election observation) was made in a parent process, before
    ``os.fork()``: the lease is the parent's, untouched by the child. (Clients are not
    refused: a child connects afresh on its first call.)"""


class RuntimeFailure(Error):
    """The process could not do what the library needs: start the binding's runtime
    threads, or read the operating system's random source for an owner token."""
