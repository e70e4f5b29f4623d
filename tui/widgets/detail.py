"""The detail pane: one job's document, lease, verification and checks, diff, timeline and output."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from tui import render

if TYPE_CHECKING:
    from textual.widgets import TabbedContent

    from core.read.inspect_job import JobDetail
    from tui.services.check_runner import LiveCheck

TABS = (
    ("job", "Job"),
    ("lease", "Lease"),
    ("verify", "Verify"),
    ("diff", "Diff"),
    ("timeline", "Timeline"),
    ("output", "Output"),
)


class DetailPane(Vertical):
    """Shows the `JobDetail` it is given; it reads nothing itself.

    Its tabs (some thirty widgets to compose and style) are mounted by `build`, which the
    board calls once its first rows are on the screen: until then the pane keeps what it
    is given and shows only its title line, so the first frame does not wait for them.
    """

    ALLOW_MAXIMIZE = True

    def __init__(self, root: Path | None = None, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.root = root  # the repository's, so that its paths show from there
        self.detail: JobDetail | None = None
        self.signature_required = True
        # The checks of the shown job that this board runs now, with their output so far.
        self.live: Mapping[str, LiveCheck] = {}
        self._tabs: TabbedContent | None = None  # once `build` has mounted them
        self._building = False
        self._active = f"tab-{TABS[0][0]}"  # the tab to show once they are mounted (`build`)
        # What the apply plane says of the shown job, atop its Job tab (set by the board).
        self.plane: list[str] = []

    def compose(self) -> ComposeResult:
        yield Static(Text("no job selected"), id="detail-title")

    async def build(self) -> None:
        """Mount the tabs (once), then show in them what the pane was given."""
        if self._building:
            return
        self._building = True
        # Imported here: these widgets' modules are not needed before the first frame.
        from textual.containers import VerticalScroll
        from textual.widgets import TabbedContent, TabPane

        tabs = TabbedContent(id="detail-tabs", initial=self._active)
        for tab_id, title in TABS:  # as `with TabPane(...)` in a compose would add them
            body = VerticalScroll(
                Static(id=f"detail-{tab_id}", classes="detail-body"), classes="detail-scroll"
            )
            tabs.compose_add_child(TabPane(title, body, id=f"tab-{tab_id}"))
        await self.mount(tabs)
        self._tabs = tabs
        tabs.active = self._active  # a tab chosen while they were mounting
        if self.detail is not None:
            self.show(self.detail)

    def tick(self) -> None:
        """Show the relative times ("5s ago") of the job and its lease as of now."""
        if self.detail is None or self._tabs is None:
            return
        now = time.time()
        job = render.plane_text(self.plane, self.root) + render.job_text(self.detail, now, self.root)
        self._body("job").update(job)
        self._body("lease").update(render.lease_text(self.detail, now))

    def set_plane(self, lines: list[str]) -> None:
        """What the apply plane says of the shown job: its queue place, why it is left, its overlaps."""
        if lines != self.plane:
            self.plane = lines
            self.tick()

    def step_tab(self, step: int) -> None:
        """Show the next (or previous) tab, wrapping around."""
        ids = [f"tab-{tab_id}" for tab_id, _ in TABS]
        shown = self._tabs.active if self._tabs is not None else self._active
        here = ids.index(shown) if shown in ids else 0
        self._activate(ids[(here + step) % len(ids)])

    def show_tab(self, tab_id: str) -> None:
        self._activate(f"tab-{tab_id}")

    def _activate(self, pane_id: str) -> None:
        if self._tabs is not None:
            self._tabs.active = pane_id
        else:
            self._active = pane_id

    def _body(self, tab_id: str) -> Static:
        return self.query_one(f"#detail-{tab_id}", Static)

    def show_loading(self, key: str) -> None:
        """Say which job is on its way, keeping the last one shown until it arrives."""
        self.query_one("#detail-title", Static).update(Text(f"{key}  loading…", style="dim"))

    def show_message(self, message: Text) -> None:
        self.detail = None
        self.query_one("#detail-title", Static).update(message)
        if self._tabs is None:
            return
        for tab_id, title in TABS:
            self._body(tab_id).update("")
            self._tabs.get_tab(f"tab-{tab_id}").label = title  # no badge of a job not shown

    def show_checks(self, live: Mapping[str, LiveCheck]) -> None:
        """Show the checks this board runs for the shown job (their output as it comes)."""
        self.live = live
        if self.detail is not None and self._tabs is not None:
            self._show_verify(self.detail, self._tabs)

    def _show_verify(self, detail: JobDetail, tabs: TabbedContent) -> None:
        applied = detail.located is not None and detail.located.folder == "applied"
        checks = render.checks_text(detail.checks, self.live, root=self.root)
        missing = [c.name for c in detail.checks if c.required and not c.satisfied]
        self._body("verify").update(
            render.verification_text(
                detail.verification,
                self.signature_required,
                applied=applied,
                root=self.root,
                checks=checks,
                missing=missing,
            )
        )
        if detail.verification is not None:
            v = detail.verification
            label = f"Verify {'✔' if v.ok or (applied and v.only_base_failed()) else '✘'}"
            marks = render.check_marks(detail.checks, self.live)
            tabs.get_tab("tab-verify").label = f"{label} {marks}" if marks else label

    def show(self, detail: JobDetail) -> None:
        self.detail = detail
        self.query_one("#detail-title", Static).update(render.title_text(detail))
        tabs = self._tabs
        if tabs is None:
            return  # `build` shows it
        applied = detail.located is not None and detail.located.folder == "applied"
        self.tick()
        self._show_verify(detail, tabs)
        self._body("diff").update(render.diffs_text(detail.diffs, applied))
        self._body("timeline").update(render.timeline_text(detail))
        self._body("output").update(render.output_text(detail))
        for tab_id, title in TABS:
            label = title
            if tab_id == "verify" and detail.verification is not None:
                continue  # `_show_verify` labels it, with the checks' marks
            if tab_id == "diff" and detail.diffs:
                label = f"Diff ({len(detail.diffs)})"
            elif tab_id == "timeline" and detail.timeline:
                label = f"Timeline ({len(detail.timeline)})"
            tabs.get_tab(f"tab-{tab_id}").label = label
