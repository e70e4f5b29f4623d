"""The approve preflight: paths, lines, signature, base, checks; `y` applies, `n` cancels.

For a STALE receipt that merges clean over the tree as it is, `MergeDialog` shows the
merged diff and offers "Merge and apply" (`core.review.merge.apply_merged`, run by the
board in a thread) or a replay; one that conflicts is offered a replay, with its hunks.

For a best-of-N candidate whose required checks have not run (they run on a chosen
receipt), `y` chooses it without applying.

In a git repository it also offers to commit the applied paths with a `Genjob-Key:`
trailer (`genjob apply --commit`); `c` toggles it, and `policy.commit_on_approve` in
`config.toml` says what it starts at.

The preflight follows the job while it is open: read again as a check of the job starts
or ends (`reread`), and every RECHECK seconds while one runs, so that what it offers is
what apply would do now.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Static

from core.errors import GenjobError
from core.model.standing import CheckState
from core.read.preflight import MergePreflight, Preflight
from core.store.layout import Layout
from tui.dialogs import fit_to_terminal
from tui.render import merge_text, preflight_text

# How often (s) an open preflight reads its job again while one of its checks runs.
RECHECK = 2.0


@dataclass(frozen=True)
class TrustOwnKey:
    """The preflight's other answer: pin this machine's own worker key, which signed the
    receipt (`core.store.signing.trust_own_worker_key`), then look again."""

    path: str
    fingerprint: str


@dataclass(frozen=True)
class Approval:
    """The preflight's answer: apply, and whether to commit too; for a job with best-of-N
    candidates, which one to choose first."""

    commit: bool
    candidate: int | None = None
    choose_only: bool = False  # make the candidate the job's receipt, so its checks can run
    protected: bool = False  # the operator approved writing its protected paths


class PreflightDialog(ModalScreen[Approval | TrustOwnKey | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Apply", id="preflight.yes"),
        Binding("n,escape", "answer(False)", "Cancel", id="preflight.no"),
        Binding("c", "toggle_commit", "Commit too", id="preflight.commit"),
        Binding("p", "toggle_protected", "Write protected paths", id="preflight.protected"),
        Binding("k", "trust_own_key", "Trust this machine's key", id="preflight.trust"),
    ]

    def __init__(self, preflight: Preflight, root: Path | None = None, layout: Layout | None = None) -> None:
        super().__init__()
        self.preflight = preflight
        self.root = root
        self.repo = layout  # to read the job again; None: a candidate's, shown as it was

    def compose(self) -> ComposeResult:
        p = self.preflight
        with Vertical(classes="dialog wide"):
            yield Static("Approve: preflight", classes="dialog-title")
            with VerticalScroll(classes="dialog-body"):
                yield Static(preflight_text(p, self.root), id="preflight-body")
            if p.git:
                yield Checkbox(
                    "commit the applied paths, with a Genjob-Key: trailer (c)",
                    p.commit_default,
                    id="commit",
                )
            if p.protected:
                yield Checkbox("I read the diff: write its protected paths too (p)", False, id="protected")
            with Horizontal(classes="dialog-buttons"):
                if p.may_choose:
                    yield Button(Text(f"Choose {p.candidate} (y)"), id="yes", variant="primary")
                else:
                    yield Button("Apply (y)", id="yes", variant="success", disabled=not p.may_apply)
                yield Button("Trust this machine's key (k)", id="trust", variant="warning")
                yield Button("Cancel (n)", id="no")

    def on_mount(self) -> None:
        fit_to_terminal(self)
        self._show_choices()
        p = self.preflight
        self.query_one("#yes" if p.may_apply or p.may_choose else "#no", Button).focus()
        if self.repo is not None:
            self.set_interval(RECHECK, self._while_checks_run)

    def _show_choices(self) -> None:
        """Offer apply, and its options, only when apply would run."""
        p = self.preflight
        for box in self.query(Checkbox):
            box.display = p.may_apply
        self.query_one("#trust", Button).display = p.own_key is not None
        if not p.may_choose:
            self.query_one("#yes", Button).disabled = not p.may_apply

    def show(self, preflight: Preflight) -> None:
        """The job as read again: its body, and what it offers."""
        self.preflight = preflight
        self.query_one("#preflight-body", Static).update(preflight_text(preflight, self.root))
        self._show_choices()

    def _while_checks_run(self) -> None:
        if any(c.state is CheckState.RUNNING for c in self.preflight.checks):
            self.reread()

    def reread(self) -> None:
        """Read the job again, off the loop (a check of it started or ended)."""
        if self.repo is not None:
            self.run_worker(self._reread, thread=True, group="preflight", exclusive=True, exit_on_error=False)

    def _reread(self) -> None:
        from core.read.inspect_job import job_detail
        from core.read.preflight import preflight

        assert self.repo is not None
        try:
            fresh = preflight(self.repo, job_detail(self.repo, self.preflight.key))
        except GenjobError:
            return  # the job moved on (applied, rejected): the next key press says so
        self.app.call_from_thread(self.show, fresh)

    @property
    def commit(self) -> bool:
        return bool(self.query("#commit")) and self.query_one("#commit", Checkbox).value

    @property
    def protected(self) -> bool:
        return bool(self.query("#protected")) and self.query_one("#protected", Checkbox).value

    def action_toggle_commit(self) -> None:
        for box in self.query("#commit"):
            if isinstance(box, Checkbox):
                box.toggle()

    def action_toggle_protected(self) -> None:
        for box in self.query("#protected"):
            if isinstance(box, Checkbox):
                box.toggle()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "trust":
            self.action_trust_own_key()
        else:
            self.action_answer(event.button.id == "yes")

    def action_trust_own_key(self) -> None:
        """Offered only when this machine's own worker key signed the receipt, unpinned."""
        p = self.preflight
        if p.own_key is None or p.own_key_fingerprint is None:
            self.notify("only this machine's own worker key can be trusted from here", severity="warning")
            return
        self.dismiss(TrustOwnKey(p.own_key, p.own_key_fingerprint))

    def action_answer(self, value: bool) -> None:
        if value and not self.preflight.verified:
            self.notify("the receipt does not verify: apply would be refused", severity="error", markup=False)
            return
        if value and self.preflight.may_choose:
            self.dismiss(Approval(False, self.preflight.candidate, choose_only=True))
            return
        if value and self.preflight.checks_missing:
            missing = ", ".join(self.preflight.checks_missing)
            self.notify(
                f"required checks have not passed ({missing}): apply would be refused",
                severity="error",
                markup=False,
            )
            return
        if value and self.preflight.protected and not self.protected:
            self.notify(
                "it writes protected paths: read the diff, then p approves writing them", severity="warning"
            )
            return
        self.dismiss(Approval(self.commit, protected=self.protected) if value else None)


class MergeDialog(ModalScreen[str | None]):
    """The preflight of a STALE receipt that merges clean over the tree as it is: the
    merged diff; `y` merges and applies it (the required checks run on the merged bytes
    first), `R` replays it instead, `n` cancels. Answers "merge", "replay" or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer('merge')", "Merge and apply", id="merge.yes"),
        Binding("R", "answer('replay')", "Replay", id="merge.replay"),
        Binding("n,escape", "answer('')", "Cancel", id="merge.no"),
    ]

    def __init__(self, preflight: MergePreflight) -> None:
        super().__init__()
        self.preflight = preflight

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Static("Approve: stale, merges clean", classes="dialog-title")
            with VerticalScroll(classes="dialog-body"):
                yield Static(merge_text(self.preflight), id="merge-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Merge and apply (y)", id="merge", variant="success")
                yield Button("Replay (R)", id="replay")
                yield Button("Cancel (n)", id="cancel")

    def on_mount(self) -> None:
        fit_to_terminal(self)
        self.query_one("#merge", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_answer("" if event.button.id == "cancel" else str(event.button.id))

    def action_answer(self, answer: str) -> None:
        self.dismiss(answer or None)
