"""The worker: claiming a job, shipping its bundle to a generator host over a transport,
and bringing back its outputs and a signed receipt; best-of-N candidates, the worker
loop and the fleet of hosts. It holds no apply rights.
"""
