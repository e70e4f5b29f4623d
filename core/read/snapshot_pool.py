"""Reading the files of many keys in several processes at once, for a cold scan; and
listing a large growing folder in another process, for a warm one.

A scan with no index reads every job document, receipt and attempts file under `.gen/`;
parsing them is CPU work, so on a machine with several cores the keys are read in
chunks by forked worker processes (`concurrent.futures`) while this process reads
chunks too. A worker sends what it read when no chunk is left, as one marshal'd block of
the columns the index stores (`core.read.snapshot_index.FACTS`): sending each chunk as it is
done makes the workers wait for this busy process to take the bytes in.

A warm scan re-reads little, but must stat every file that grows in place (70,000
attempts files at 100,000 jobs, 0.3 s, most of it in the kernel). `list_apart` has a
forked process do it while this one loads the index and makes the rows it has cached
facts for; the process first reads the leases those rows need (10,000 at 100,000 jobs,
0.07 s), which this one would otherwise read itself.

Only from a process with no other thread (a fork copies the calling thread alone), and
only for enough keys to pay for the processes. A worker that fails costs nothing but
time: its keys are left to the caller, which reads them as usual.
"""

from __future__ import annotations

import marshal
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence

from core.read.snapshot_index import FACTS
from core.read.snapshot_records import FileFacts, FileId, PackedIds
from core.store.durable import write_all

# At most this many processes (this one included), with at least this many keys for
# each, in at most 256 chunks of at least this many keys.
WORKERS_MAX = 4
WORKER_KEYS_MIN = 2000
CHUNK_KEYS_MIN = 200

ReadOne = Callable[[str], tuple[FileFacts, bool]]

# In a worker process: the function, the chunks of keys, and the read end of the pipe
# their numbers are taken from (set by `_start_worker`, never in the parent).
_work: tuple[ReadOne, list[list[str]], int] | None = None


def _threads() -> int:
    threading = sys.modules.get("threading")
    return threading.active_count() if threading is not None else 1


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _start_worker(read_one: ReadOne, chunks: list[list[str]], tasks: int) -> None:
    """A worker's initializer; a forked worker gets its arguments with its memory, unpickled."""
    global _work
    _work = (read_one, chunks, tasks)


def _read_chunks() -> bytes:
    """In a worker: the facts of every chunk it takes, as the index stores them, with
    whether each had settled, by chunk number."""
    if _work is None:
        raise RuntimeError("a pool worker with nothing to read")
    read_one, chunks, tasks = _work
    done = {}
    while task := os.read(tasks, 1):
        made = list(map(read_one, chunks[task[0]]))
        done[task[0]] = (FACTS.split([facts for facts, _ in made]), tuple(settled for _, settled in made))
    return marshal.dumps(done)


def read_many(keys: Sequence[str], read_one: ReadOne) -> Iterator[tuple[str, FileFacts, bool]]:
    """`read_one` of each of `keys` (as key, facts, settled), by several processes at once;
    nothing, when several processes would not pay (the caller reads them itself).

    Each process takes chunks of keys by reading one byte, a chunk's number, from a pipe
    that holds all of them: a read is atomic, so each chunk goes to exactly one process,
    a slow or busy process takes fewer, and one that dies holds nothing back but what it
    took. This process's chunks are given as they are read, the workers' when they end.
    """
    workers = min(_cpus(), WORKERS_MAX, len(keys) // WORKER_KEYS_MIN)
    if workers < 2 or _threads() > 1 or not hasattr(os, "fork"):
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    step = max(CHUNK_KEYS_MIN, -(-len(keys) // 256))
    chunks = [list(keys[i : i + step]) for i in range(0, len(keys), step)]
    tasks, queue = os.pipe()
    try:
        os.write(queue, bytes(range(len(chunks))))  # at most 256 bytes: within any pipe's buffer
    finally:
        os.close(queue)
    try:
        with ProcessPoolExecutor(
            workers - 1,
            mp_context=multiprocessing.get_context("fork"),
            initializer=_start_worker,
            initargs=(read_one, chunks, tasks),
        ) as pool:
            futures = [pool.submit(_read_chunks) for _ in range(workers - 1)]
            while task := os.read(tasks, 1):
                for key in chunks[task[0]]:
                    yield (key, *read_one(key))
            for future in futures:
                if future.exception() is None:
                    yield from _taken(future.result(), chunks)
    finally:
        os.close(tasks)


def _taken(data: bytes, chunks: list[list[str]]) -> Iterator[tuple[str, FileFacts, bool]]:
    """What a worker sent, chunk by chunk; a chunk whose reply does not fit is skipped."""
    try:
        done = marshal.loads(data)
        replies = list(done.items())
    except (ValueError, EOFError, TypeError, AttributeError):
        return
    for index, reply in replies:
        try:
            columns, settled = reply
            facts = list(FACTS.join(columns))
            keys = chunks[index]
        except (ValueError, TypeError, IndexError):
            continue
        if len(facts) == len(keys) == len(settled):
            yield from zip(keys, facts, settled, strict=True)


class Apart:
    """A growing folder being listed by a forked process, which first reads some files
    ahead (`list_apart`)."""

    def __init__(self, pid: int, reply: int, store: int) -> None:
        self._pid, self._reply, self._store = pid, reply, store

    def ahead(self) -> dict[str, bytes]:
        """The files the process read ahead, by key; empty if it failed. Call it at most
        once, before `files`."""
        store, self._store = self._store, -1
        try:
            size = int.from_bytes(_exactly(self._reply, 8), "big")
            got = marshal.loads(os.pread(store, size, 0)) if size else None
        except (ValueError, EOFError, TypeError, OSError):
            got = None
        finally:
            if store >= 0:
                os.close(store)
        if type(got) is dict and all(type(k) is str and type(v) is bytes for k, v in got.items()):
            return got
        return {}

    def files(self, before: Mapping[str, FileId] | None) -> Mapping[str, FileId] | None:
        """The folder's entries as the process listed them (`before` itself when they
        are the same); None if it failed (the caller lists the folder itself). Call it
        once, however the scan ends."""
        try:
            if self._store >= 0:  # the files read ahead were not asked for
                self.ahead()
            got = marshal.loads(_receive(self._reply))
        except (ValueError, EOFError, TypeError, OSError):
            got = None
        finally:
            os.close(self._reply)
            try:
                status = os.waitpid(self._pid, 0)[1]
            except ChildProcessError:  # reaped already (SIGCHLD ignored): its fate is unknown
                status = -1
        if status != 0 or type(got) is not tuple or len(got) != 2:
            return None
        try:
            files = PackedIds(*got)
        except ValueError:
            return None
        # Compared as two blocks of bytes, not 70,000 tuples made and compared (`scan_warm`).
        return before if before is not None and files == before else files


def list_apart(
    list_one: Callable[[], dict[str, FileId]], ahead: Callable[[], dict[str, bytes]]
) -> Apart | None:
    """`ahead()`, then `list_one()`, run by a forked process; None when there is no
    other core, or this process has other threads.

    What `ahead()` reads goes through a file in memory, not the pipe: a pipe holds
    64 KiB, and the process would wait for this one to take the rest before listing.
    Without such files (`os.memfd_create`) nothing is read ahead.
    """
    if _threads() > 1 or _cpus() < 2 or not hasattr(os, "fork"):
        return None
    try:
        store = os.memfd_create("genjob-ahead", os.MFD_CLOEXEC) if hasattr(os, "memfd_create") else -1
    except OSError:
        store = -1
    reply, out = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        for fd in (reply, out, store):
            if fd >= 0:
                os.close(fd)
        return None
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(reply)
            read = marshal.dumps(ahead()) if store >= 0 else b""
            write_all(store, read)
            write_all(out, len(read).to_bytes(8, "big"))
            packed = PackedIds.of(list_one())
            write_all(out, _message(marshal.dumps((packed.names, packed.numbers))))
            code = 0
        finally:
            os._exit(code)
    os.close(out)
    return Apart(pid, reply, store)


def _message(data: bytes) -> bytes:
    """A message for `_receive`: its length (8 bytes, big-endian), then `data`."""
    return len(data).to_bytes(8, "big") + data


def _receive(fd: int) -> bytes:
    """The next message, as `_message` made it; EOFError if the pipe ends first."""
    size = int.from_bytes(_exactly(fd, 8), "big")
    return _exactly(fd, size)


def _exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the process ended early")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
