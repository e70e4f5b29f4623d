"""`genjob allow`: show exactly what a repository's config would run, and pin it.

A config that arrived with the repository runs nothing until the operator has seen
what it would run and allowed it (`core.store.config.load_config` holds it back until then).
`describe` is what they see: each host with where the job's files go and the command it
runs there, each check with its confinement and command, and each setting that lowers a
default. `allow` pins the sha256 of that (`core.store.config.runs_digest`) in the operator's own
folder (`core.store.pins`); any change to it asks again.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from core.errors import GenjobError
from core.review import sandbox
from core.review.host_sandbox import LocalSandbox
from core.store.config import Check, Config, Host, read_repository_config, runs_digest, what_runs
from core.store.events import record_event
from core.store.layout import Layout
from core.store.pins import pin_config, read_pins


@dataclass(frozen=True)
class Consent:
    """What the repository's config would run, and whether the operator allowed it."""

    digest: str | None
    allowed: bool
    changed: bool
    lines: list[str]

    @property
    def needed(self) -> bool:
        """Whether the config runs or lowers anything the operator has not allowed."""
        return self.digest is not None and not self.allowed


def _host_lines(name: str, host: Host) -> list[str]:
    if host.transport == "local":
        where = f"on this machine, {LocalSandbox.of(host).describe()}"
        if host.read_only:
            where += f"; may also read {', '.join(host.read_only)}"
    elif host.transport == "ssh":
        where = (
            f"over ssh to {host.address}:{host.port} with the key {host.identity} "
            "(the job's files and instruction go there)"
        )
    else:
        assert host.command is not None
        where = f"through the command {shlex.join(host.command)} (the job's files and instruction go there)"
    lines = [f"host {name}: {where}", f"    generator: {host.generator}"]
    if host.python is not None:
        lines.append(f"    python there: {host.python}")
    if host.pass_env:
        local = host.transport == "local"
        source = "genjob's environment here" if local else "the runner's environment there"
        lines.append(f"    the generator also gets, from {source}: {', '.join(host.pass_env)}")
    if host.cleanup is not None:
        lines.append(f"    cleanup, run ON THIS MACHINE when a run's worker died: {host.cleanup}")
    return lines


def _check_lines(name: str, check: Check) -> list[str]:
    if check.sandbox == "none":
        how = "UNSANDBOXED: it runs with all your rights, network included"
    else:
        problem = sandbox.bwrap_problem()
        how = "sandboxed (bwrap): no network, only its scratch tree writable"
        if problem is not None:
            how = f"sandboxed (bwrap), which cannot run here ({problem}): it will refuse to run"
    if check.read_only:
        how += f"; may also read {', '.join(check.read_only)}"
    return [f"check {name}: {how}", f"    run: {check.run}"]


def describe(config: Config) -> list[str]:
    """The lines `genjob allow` shows: what `config` would run and what it would lower."""
    lines: list[str] = []
    for name, host in sorted(config.hosts.items()):
        lines += _host_lines(name, host)
    for name, check in sorted(config.checks.items()):
        lines += _check_lines(name, check)
    for setting, value in what_runs(config)["lowers"].items():
        if setting == "policy.require_signature":
            lines.append("lowers policy.require_signature to false: unsigned receipts may be applied")
        elif setting == "policy.auto_apply":
            lines.append(
                f'sets policy.auto_apply to "{value}": apply --ready --watch writes receipts into the tree '
                "with no person in the loop"
            )
        elif setting == "policy.auto_merge":
            lines.append("sets policy.auto_merge to true: apply --ready merges stale receipts unasked")
        elif setting == "policy.auto_replay":
            lines.append(
                "sets policy.auto_replay to true: apply --ready replays a job it cannot merge (a model call "
                f"unasked), up to {value} replay(s) down one job's chain"
            )
        else:
            lines.append(f"lowers {setting} to {value} (a larger bound on what a host may send back)")
    return lines


def consent(layout: Layout) -> Consent:
    """What `layout`'s config would run, and whether the operator allowed exactly that."""
    config = read_repository_config(layout.config)
    digest = runs_digest(config)
    pinned = read_pins(layout.root).config
    allowed = digest is None or pinned == digest
    return Consent(digest, allowed, not allowed and pinned is not None, describe(config))


def allow(layout: Layout, digest: str) -> None:
    """Pin `digest`, the one the operator was shown, as what this repository's config may run.

    The caller passes the digest it showed: a config that changed in between is refused,
    so what is pinned is always what was seen.
    """
    now = consent(layout)
    if now.digest != digest:
        raise GenjobError(f"{layout.config}: changed while you read it; run `genjob allow` again")
    pin_config(layout.root, digest)
    record_event(layout, "allowed", None, config=digest)


def allow_as_written(layout: Layout) -> None:
    """Pin what the config runs now: only for a caller that wrote that config itself."""
    digest = consent(layout).digest
    if digest is not None:
        allow(layout, digest)
