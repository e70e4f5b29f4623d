"""What model runs cost, per job and per host, and the `[budget]` that refuses a dispatch past it.

A preset host's run leaves a `usage` record in `.gen/attempts/<key>.jsonl` (model, tokens
in and out, dollars), parsed from what the tool printed (`core.model.presets`). Spend
is summed from those records: per job from its own file, per host over every job's.
Before a run is dispatched, the run's most (a claude host's `max_budget_usd`; nothing
known for the others) is added to what was spent: a run that could pass its job's or
its host's budget is refused before the claim, in one line naming the budget and what
is left. A tool that reports no dollars (codex, llm) is counted in tokens only.
"""

from __future__ import annotations

import os

from core.errors import BadInput, GenjobError
from core.model.presets import DEFAULT_MAX_BUDGET_USD, USAGE, Spend, Usage, parse_usage, spend_of
from core.store.config import Config, Host
from core.store.events import attempts, record_attempt
from core.store.layout import Layout


class OverBudget(GenjobError):
    """A dispatch that could pass a `[budget]` limit."""


def note_usage(
    layout: Layout, key: str, attempt: int, name: str, host: Host, output: bytes, candidate: int | None = None
) -> Usage | None:
    """Record what a preset host's run reported it used; None for a host with no preset or
    a run that reported nothing."""
    settings = host.preset_settings
    if settings is None:
        return None
    usage = parse_usage(settings.preset, output, settings.model)
    if usage is None:
        return None
    which = {} if candidate is None else {"candidate": candidate}
    record_attempt(
        layout, key, USAGE, attempt=attempt, host=name, preset=settings.preset, **usage.to_dict(), **which
    )
    return usage


def job_spend(layout: Layout, key: str) -> Spend:
    return spend_of(attempts(layout, key))


def host_spend(layout: Layout) -> dict[str, Spend]:
    """Every host's runs, summed over every job's attempt records."""
    totals: dict[str, Spend] = {}
    try:
        names = sorted(os.listdir(layout.attempts))
    except FileNotFoundError:
        return totals
    for name in names:
        if not name.endswith(".jsonl") or name.startswith("."):
            continue
        try:
            records = [r for r in attempts(layout, name[: -len(".jsonl")]) if r.get("event") == USAGE]
        except BadInput:
            continue  # a file that is not a log: `show` names it for that job
        for record in records:
            host = record.get("host")
            if isinstance(host, str):
                totals.setdefault(host, Spend()).add(record)
    return totals


def most_a_run_costs(host: Host) -> float:
    """The most one run on `host` may cost by its own limit: a claude host's
    `max_budget_usd`; 0 where the tool has no such limit (only spend counts there)."""
    settings = host.preset_settings
    if settings is None or settings.preset != "claude":
        return 0.0
    return settings.max_budget_usd or DEFAULT_MAX_BUDGET_USD


def check_budget(layout: Layout, config: Config, name: str, key: str | None) -> None:
    """Refuse (OverBudget) a run of `key` (None: the next queued job) on host `name` that
    could pass the job's or the host's budget."""
    budget = config.budget
    host_limit = budget.hosts.get(name, budget.per_host)
    if budget.per_job is None and host_limit is None:
        return
    most = most_a_run_costs(config.hosts[name])
    if budget.per_job is not None and key is not None:
        _within(f"job {key}'s per_job budget", budget.per_job, job_spend(layout, key).cost_usd, most, name)
    if host_limit is not None:
        which = f"host {name}'s budget" if name in budget.hosts else f"host {name}'s per_host budget"
        _within(which, host_limit, host_spend(layout).get(name, Spend()).cost_usd, most, name)


def _within(which: str, limit: float, spent: float, most: float, host: str) -> None:
    left = limit - spent
    if left <= 0:
        raise OverBudget(f"[budget]: {which} is spent (${spent:.2f} of ${limit:.2f}); not dispatched")
    if most > left:
        raise OverBudget(
            f"[budget]: {which} has ${left:.2f} of ${limit:.2f} left, and a run on {host} may cost up to "
            f"${most:.2f} (its max_budget_usd); not dispatched"
        )
