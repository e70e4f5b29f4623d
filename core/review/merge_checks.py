"""Checks on merged bytes: a merge writes bytes that no receipt named, so the checks that
passed on the receipt's outputs do not speak for them.

Before a merge is applied, each required check (`policy.require_checks`) runs on the
merged result the way a check runs on a receipt (`core.review.checks`: a scratch tree of
the repository as it is, under the check's sandbox), with the merged bytes staged under
`.gen/merges/<key>/` written in. Its record is kept apart from the receipt's, under
`.gen/checks/<key>/merged-<digest>/`, bound to the merged bytes and to the tree's bytes
they are laid over (`core.model.check_record.MergedOutputs`). A record that is bound to
them stands, passed or failed: a check that failed on a merge is not run again on the
same bytes, and the way on is a replay.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from core.errors import BadInput
from core.model.check_record import CheckRecord, CheckResult, MergedOutputs
from core.model.models import Job, Receipt
from core.review.check_status import ChecksRequired, describe
from core.review.checks import run_check
from core.store.check_records import read_record
from core.store.config import Check, Config
from core.store.layout import Layout


def bound_record(
    layout: Layout, key: str, name: str, check: Check, merged: MergedOutputs
) -> CheckRecord | None:
    """The record of check `name` that speaks for `merged` now; None when there is none (a
    record that does not read, or ran on other bytes or another command, is none)."""
    try:
        record = read_record(layout, key, name, merged=merged.digest)
    except BadInput:
        return None
    if record is None or not merged.checked_by(record):
        return None
    if (record.command, record.sandbox) != (check.run, check.sandbox):
        return None
    return record


def run_merged_checks(
    layout: Layout, job: Job, receipt: Receipt, merged: MergedOutputs, staged: Path, config: Config
) -> None:
    """Run each required check that has no record bound to `merged` yet, on the merged
    bytes staged in `staged` (a folder below `.gen/`), one after another."""
    named = receipt.model_copy(update={"outputs": merged.outputs})
    for name in config.policy.require_checks:
        check = config.checks.get(name)
        if check is None or bound_record(layout, job.key, name, check, merged) is not None:
            continue
        asyncio.run(run_check(layout, job, named, name, config, out=staged, merged=merged))


def require_merged_checks(layout: Layout, job: Job, merged: MergedOutputs, config: Config) -> None:
    """Raise ChecksRequired, naming each, unless every required check passed on `merged`."""
    faults = []
    for name in config.policy.require_checks:
        check = config.checks.get(name)
        if check is None:
            held = config.held.hint if config.held is not None else f"{layout.config}: not configured"
            faults.append(f"{name} did not run ({held})")
            continue
        record = bound_record(layout, job.key, name, check, merged)
        if record is None:
            faults.append(f"{name} has not run on them")
        elif record.result is not CheckResult.PASSED:
            faults.append(f"{name} {describe(record)}")
    if faults:
        raise ChecksRequired(
            f"{job.key}: required check{'s' if len(faults) > 1 else ''} did not pass on the merged "
            f"bytes: {'; '.join(faults)}; nothing was written. Replay it over the tree as it is: "
            f"genjob replay {job.key}"
        )
