"""The board's invisible widgets: what reads `.gen/` and posts what it finds (the feed), runs
the checks as receipts arrive (the check runner), and turns keys into core calls (the
actions), each posting typed messages (`tui.messages`) to the screen.
"""
