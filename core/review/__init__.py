"""Judging a receipt and writing the tree: verification step by step, the project's checks
in a scratch tree under the sandbox, best-of-N candidates chosen, apply (the only writer
of the tree) and recover, the consent a repository's config needs.
"""
