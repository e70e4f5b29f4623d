"""Formats and pure rules: the contract and its documents, canonical JSON and digests,
allowed paths, the lifecycle and the lease rule, where a receipt stands, protected
paths. Nothing here writes to disk.
"""
