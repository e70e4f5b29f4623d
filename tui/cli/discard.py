"""`genjob discard KEY`: set an INVALID job's unreadable files aside as evidence."""

from __future__ import annotations

import click

from core.model.terminal import visible
from core.review.discard import discard
from core.store.job_keys import resolve_key
from tui.cli.commands import layout_of


@click.command("discard")
@click.argument("key")
@click.pass_context
def discard_cmd(ctx: click.Context, key: str) -> None:
    """Move the files of INVALID job KEY that do not parse to .gen/logs/KEY/ (nothing is deleted)."""
    layout = layout_of(ctx)
    done = discard(layout, resolve_key(layout, key))
    for rel, kept, fault in zip(done.moved, done.kept, done.faults, strict=True):
        click.echo(f"set aside .gen/{visible(rel)} as {visible(str(kept.relative_to(layout.root)))}")
        click.echo(f"  it did not parse: {visible(fault)}")
