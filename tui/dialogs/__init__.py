"""Modal dialogs: each returns its answer with `dismiss(value)`."""
