"""The one error hierarchy of genjob.

Every fault a user can act on is a `GenjobError`: its message names the file (or key)
and the fault, and the CLI and the dashboard show that same text. `exit_code` is what
the CLI exits with.
"""

from __future__ import annotations


class GenjobError(Exception):
    """A fault the user can act on; nothing was changed."""

    exit_code = 2


class BadInput(GenjobError):
    """A file, argument or document that does not meet the contract."""


class TooLarge(BadInput):
    """A file over the size it may have to be read at all."""


class KeyConflict(GenjobError):
    """One idempotency key, two different documents."""


class NotFound(GenjobError):
    """No job (or no repository) where one was named."""


class WrongState(GenjobError):
    """The operation does not apply to the job's current state."""


class NothingToClaim(GenjobError):
    """The queue is empty (or every job in it was taken by someone else)."""

    exit_code = 1


class VerificationFailed(GenjobError):
    """A receipt did not pass every check that apply requires: a bad input to apply."""


class DurabilityError(GenjobError):
    """An fsync or rename failed: the operation stopped and is not retried."""


class SecretFound(BadInput):
    """An instruction or input file looks like it holds a credential."""


class ApplyConflict(GenjobError):
    """A target changed while apply ran: what this job wrote was rolled back."""


class RolledBack(ApplyConflict):
    """An interrupted apply that could not be finished was rolled back from the originals
    it kept: the tree holds the job's inputs again (but for a user's later edits)."""


class TornApply(GenjobError):
    """An interrupted apply that can be neither finished nor rolled back: nothing more was
    written, its journal stays, and the message says what the operator can do."""


class Untrusted(BadInput):
    """A trust anchor, policy or journal that someone other than its owner could have written."""


class Stale(VerificationFailed):
    """The tree no longer matches the job's inputs: the job must be replayed, not applied."""
