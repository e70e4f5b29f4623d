"""How a local generator host's runs are confined: its `sandbox`, `network` and `read_only`
settings, what they mean on this machine now, and the one line every view that names the
host shows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from core.review import sandbox

if TYPE_CHECKING:
    from core.store.config import Host


@dataclass(frozen=True)
class LocalSandbox:
    """How a local host's runs are confined (the host's `sandbox`, `network`, `read_only`);
    `named_by` names the host's table, for a message that refuses one of its paths."""

    kind: Literal["auto", "bwrap", "none"] = "auto"
    network: bool = False
    read_only: tuple[Path, ...] = ()
    named_by: str = "this local host"

    @classmethod
    def of(cls, host: Host, name: str | None = None) -> LocalSandbox:
        paths = tuple(Path(os.path.expanduser(p)) for p in host.read_only)
        named = f".gen/config.toml: [hosts.{name}]" if name is not None else cls.named_by
        return cls(host.sandbox, host.network, paths, named)

    def kind_now(self) -> sandbox.Kind:
        """ "bwrap" or "none" for a run starting now; SandboxError when "bwrap" was asked
        for and cannot run here."""
        if self.kind == "none":
            return "none"
        problem = sandbox.bwrap_problem()
        if problem is None:
            return "bwrap"
        if self.kind == "bwrap":
            raise sandbox.SandboxError(f'sandbox = "bwrap": {problem}')
        return "none"

    def sandboxed_now(self) -> bool:
        """Whether a run starting now would be sandboxed (False too when it would be refused)."""
        try:
            return self.kind_now() == "bwrap"
        except sandbox.SandboxError:
            return False

    def describe(self) -> str:
        """One line on what a run here can reach, for every view that names the host."""
        if self.kind == "none":
            return 'UNSANDBOXED (sandbox = "none"): the generator can read and write whatever you can'
        problem = sandbox.bwrap_problem()
        if problem is not None and self.kind == "auto":
            return (
                f"UNSANDBOXED: {problem}; the generator can read and write whatever you can "
                '(install bubblewrap, or set sandbox = "none" to say this is meant)'
            )
        if problem is not None:
            return f'refuses to run: sandbox = "bwrap" and {problem}'
        net = "network shared" if self.network else "no network"
        return f"sandboxed (bwrap): {net}, no unix sockets, only its workspace writable"
