"""Reading the files of many keys in several processes at once, for a cold scan.

A scan with no index reads every job document, receipt and attempts file under `.gen/`;
parsing them is CPU work, so on a machine with several cores the keys are read in
chunks by forked worker processes (`concurrent.futures`) while this process reads
chunks too. Each chunk's facts come back as one marshal'd block of plain values.

Only from a process with no other thread (a fork copies the calling thread alone), and
only for enough keys to pay for the processes. A worker that fails costs nothing but
time: its keys are left to the caller, which reads them as usual.
"""

from __future__ import annotations

import marshal
import os
import sys
from collections import deque
from collections.abc import Callable, Sequence

from core.snapshot_index import FACTS
from core.snapshot_records import FileFacts

# At most this many processes (this one included), with at least this many keys for
# each, in at most 256 chunks of at least this many keys.
WORKERS_MAX = 4
WORKER_KEYS_MIN = 2000
CHUNK_KEYS_MIN = 200

ReadOne = Callable[[str], tuple[FileFacts, bool]]

# What a forked worker reads: set before the pool forks, inherited by its processes.
_work: tuple[ReadOne, list[list[str]]] | None = None


def _threads() -> int:
    threading = sys.modules.get("threading")
    return threading.active_count() if threading is not None else 1


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _read_chunk(index: int) -> bytes:
    """In a worker: the facts of one chunk of keys, as the index stores them, and whether
    each had settled."""
    if _work is None:
        raise RuntimeError("a pool worker with nothing to read")
    read_one, chunks = _work
    made = list(map(read_one, chunks[index]))
    return marshal.dumps((FACTS.split([facts for facts, _ in made]), tuple(settled for _, settled in made)))


def read_many(
    keys: Sequence[str], read_one: ReadOne, meanwhile: Callable[[], None]
) -> dict[str, tuple[FileFacts, bool]]:
    """`read_one` of each of `keys`, by several processes at once, with `meanwhile` run in
    this one; or just `meanwhile` and nothing read, when that would not pay.

    Chunks go to the workers a few at a time as they finish, and this process takes
    chunks from the other end meanwhile, so a slow or busy process takes fewer.
    """
    global _work
    workers = min(_cpus(), WORKERS_MAX, len(keys) // WORKER_KEYS_MIN)
    done: dict[str, tuple[FileFacts, bool]] = {}
    if workers < 2 or _threads() > 1:
        meanwhile()
        return done
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    step = max(CHUNK_KEYS_MIN, -(-len(keys) // 256))
    chunks = [list(keys[i : i + step]) for i in range(0, len(keys), step)]
    todo = deque(range(len(chunks)))
    running: dict[Future[bytes], int] = {}
    _work = (read_one, chunks)
    try:
        with ProcessPoolExecutor(workers - 1, mp_context=multiprocessing.get_context("fork")) as pool:

            def top_up() -> None:
                while todo and len(running) < 2 * (workers - 1):
                    try:
                        future = pool.submit(_read_chunk, todo[0])
                    except BrokenProcessPool:  # a worker died: this process reads the rest
                        return
                    running[future] = todo.popleft()

            top_up()
            meanwhile()
            while todo or running:
                for future in [f for f in running if f.done()]:
                    index = running.pop(future)
                    if future.exception() is None:
                        _take(future.result(), chunks[index], done)
                top_up()
                if todo:
                    index = todo.pop()
                    done.update(zip(chunks[index], map(read_one, chunks[index]), strict=True))
                elif running:
                    wait(running, return_when=FIRST_COMPLETED)
    finally:
        _work = None
    return done


def _take(data: bytes, keys: list[str], done: dict[str, tuple[FileFacts, bool]]) -> None:
    """Adopt what a worker sent for `keys`; a reply that does not fit is dropped."""
    try:
        columns, settled = marshal.loads(data)
        facts = list(FACTS.join(columns))
    except (ValueError, EOFError, TypeError):
        return
    if len(facts) == len(keys) == len(settled):
        done.update(zip(keys, zip(facts, settled, strict=True), strict=True))
