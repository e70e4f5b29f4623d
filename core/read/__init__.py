"""Reading and listing: every job with its derived state for `genjob ls` and the board, the
board's read-model, one job's detail and what an approve would write. Nothing here
changes .gen/ but its own cache.
"""
