"""What a generator host sends back is an attacker's bytes: a result tar with forged
headers, output without end. Each one goes through the real worker (`ship`, candidates,
`genjob ship`), ends in a receipt, and leaves no buffer, file or folder unbounded.

The hostile host is a command host whose program is a script in the test's folder: it
answers the runner's protocol with whatever bytes the test wrote for it.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from corekit import mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import (
    PY,
    endless_line,
    host_block,
    hostile_host,
    runner_result,
    start_genjob,
    wait_for,
    write_config,
)

from core.remote.rules import MAX_EXTENSION_BYTES, Limits
from core.store.events import MAX_FIELD_CHARS
from core.store.layout import Layout
from core.store.receipts import load_receipt
from core.work.ship import ship
from core.work.ship_candidates import CandidateRequest, ship_candidates
from core.work.transport import JobSpec, LocalTransport, base, run_job
from tui.cli.worker import MAX_LINE_CHARS

pytestmark = pytest.mark.timeout(180)

# A quarter of a megabyte of digits in one pax header: CPython before 3.11.10 parses it in
# quadratic time holding the GIL (CVE-2024-6232); genjob ship ran 182 s with a 1 s timeout.
CVE_DIGITS = 250_000
PAX_REFUSED = (
    "refused what the generator sent back: result: member 1 (pax header '././@PaxHeader'): "
    f"{CVE_DIGITS} bytes, over the cap of {MAX_EXTENSION_BYTES} bytes"
)


def pax_bomb() -> bytes:
    """A result tar that opens with the oversized pax header, then a valid result."""
    info = tarfile.TarInfo("././@PaxHeader")
    info.type, info.size = tarfile.XHDTYPE, CVE_DIGITS
    header = info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")
    return header + b"1" * CVE_DIGITS + bytes(-CVE_DIGITS % 512) + runner_result()


def nothing_received(repo: Layout) -> None:
    """No output folder, staged or final, is left under `.gen/out/`."""
    assert not repo.out.exists() or list(repo.out.iterdir()) == []


async def test_a_pax_header_over_its_cap_ends_in_a_rejected_receipt(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    write_config(repo, hostile_host(tmp_path, "evil", pax_bomb()))
    job = mint(repo, "make it better")
    res = await ship(repo, job.key, "evil", worker_id="tester")
    assert (res.status, res.reason) == ("rejected", PAX_REFUSED)
    receipt = load_receipt(repo, job.key)
    assert receipt is not None and receipt.status == "rejected"
    nothing_received(repo)


async def test_the_same_tar_through_the_candidates_path_is_rejected_too(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    write_config(repo, hostile_host(tmp_path, "evil", pax_bomb()))
    job = mint(repo, "make it better")
    results = await ship_candidates(repo, CandidateRequest(job.key, ["evil"], 2), worker_id="tester")
    assert [(r.status, r.reason) for r in results] == [("rejected", PAX_REFUSED)] * 2
    nothing_received(repo)


async def test_a_reason_quoting_what_the_host_sent_is_cut(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """A megabyte of violations in result.json: the receipt's reason keeps its start."""
    violations = [f"{i}: " + "v" * 1000 for i in range(1000)]
    write_config(repo, hostile_host(tmp_path, "evil", runner_result(violations=violations)))
    job = mint(repo, "make it better")
    res = await ship(repo, job.key, "evil", worker_id="tester")
    assert res.status == "rejected" and res.reason is not None
    assert res.reason.startswith("0: vvv") and res.reason.endswith(" more characters)")
    assert len(res.reason) < MAX_FIELD_CHARS + 100


def test_genjob_ship_streams_a_line_without_end_cut(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """80 MB without a newline reach the terminal as one line cut at its cap, and the
    evidence kept is the configured tail."""
    write_config(repo, host_block("local", None, endless_line(tmp_path), timeout=300))
    job = mint(repo, "say a lot")
    log = tmp_path / "ship.log"
    assert start_genjob("ship", job.key, cwd=repo.root, log=log).wait() == 0, log.read_text()
    shown = log.read_text()
    assert "x" * MAX_LINE_CHARS + f" … [line cut at {MAX_LINE_CHARS} characters]\ndone\n" in shown
    assert len(shown) < 2 * MAX_LINE_CHARS, "more than the cut line and the verdict"
    evidence = repo.log_dir(job.key) / "attempt-1.log"
    assert evidence.read_bytes() == b"x" * (8192 - len(b"\ndone\n")) + b"\ndone\n"


async def test_a_result_is_read_no_faster_than_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host sends 32 MB while the thread writing the outputs is held up: what waits for
    it stays within MAX_RESULT_WAITING (and a chunk), and all of it arrives."""
    size = 32 << 20
    waited: list[int] = []
    put, read = base._Pipe.put, base._Pipe.read

    def measured_put(pipe: base._Pipe, chunk: bytes) -> object:
        room = put(pipe, chunk)
        waited.append(pipe.waiting)
        return room

    first = [True]

    def held_read(pipe: base._Pipe, n: int = -1) -> bytes:
        if first:  # the writing thread is held up until the transport stops for want of room
            first.clear()
            wait_for(lambda: pipe.waiting > base.MAX_RESULT_WAITING, "the pipe to fill")
        return read(pipe, n)

    monkeypatch.setattr(base._Pipe, "put", measured_put)
    monkeypatch.setattr(base._Pipe, "read", held_read)
    limits = Limits(max_file_bytes=64 << 20, max_total_bytes=128 << 20, max_files=10, max_tail_bytes=1024)
    spec = JobSpec(
        job_doc=json.dumps({"instruction": "x", "allowed_paths": ["out.bin"]}).encode(),
        instruction="x",
        allowed_paths=["out.bin"],
        files=dict,
        generator=f"{PY} -c \"open('out.bin', 'wb').write(b'o' * {size})\"",
        timeout=120,
        limits=limits,
    )
    outcome, info = await run_job(LocalTransport(), spec, tmp_path / "out")
    assert outcome.error is None and info is not None and info.ok, (outcome, info)
    assert (tmp_path / "out/out.bin").stat().st_size == size
    assert max(waited) <= base.MAX_RESULT_WAITING + base.CHUNK
