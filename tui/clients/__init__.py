"""Clients beside the terminal: a planning agent over MCP (`genjob mcp`), and a browser
showing the board (`genjob serve`). Each is a thin interface over the core, as the board is."""
