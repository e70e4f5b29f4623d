"""The board and the full-screen views it opens."""
