"""Which host to ship to, when `.gen/config.toml` names more than one."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from core.model.terminal import visible
from core.remote.demo_generator import stand_in_note
from core.store.config import Host

GENERATOR_SHOWN = 36
# The answer that ships a batch across every host, each at its own concurrency.
EVERY_HOST = "*every-host*"


class HostPicker(ModalScreen[str | None]):
    """Returns a host's name, EVERY_HOST (offered for a batch), or None."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel", id="hosts.cancel")]

    def __init__(self, hosts: dict[str, Host], every: bool = False) -> None:
        super().__init__()
        self.hosts = hosts
        self.every = every

    def compose(self) -> ComposeResult:
        options = []
        for name, host in self.hosts.items():
            label = Text(visible(name), style="bold")
            label.append(f"  {host.transport}", style="cyan")
            if host.address:
                label.append(f"  {visible(host.address)}", style="dim")
            label.append(f"  x{host.concurrency}", style="cyan")
            if host.stand_in:
                label.append("  stand-in: appends a comment", style="yellow")
            else:
                generator = visible(host.generator)
                if len(generator) > GENERATOR_SHOWN:  # one line per host, even at 80 columns
                    generator = generator[: GENERATOR_SHOWN - 1] + "…"
                label.append(f"  {generator}", style="dim")
            options.append(Option(label, id=name))
        if self.every:
            label = Text("every host", style="bold")
            label.append("  each runs as many jobs at once as its concurrency allows", style="dim")
            options.append(Option(label, id=EVERY_HOST))
        with Vertical(classes="dialog"):
            yield Static("Ship to which host?", classes="dialog-title")
            yield OptionList(*options, id="hosts")
            stand_ins = [visible(n) for n, h in self.hosts.items() if h.stand_in]
            if stand_ins:
                yield Static(Text(stand_in_note(stand_ins), style="yellow"), id="stand-in-note")
            yield Static(Text("enter ships, escape cancels", style="dim"))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
