"""The on-disk store: where things live under .gen/ and in the operator's config folder,
who may have written them, durable writes through descriptors, the config, the queue and
its leases, the audit log and evidence, receipts and their signatures, the operator's
pins and seals.
"""
