"""Widgets of the board; each one only shows what it is given."""
