"""SWF parsing: headers, conventions, and clear errors for bad traces."""

from __future__ import annotations

import numpy as np
import pytest

from torchhpc.ext.core.errors import InputError
from torchhpc.ext.sched.swf import read_swf

HEADER = "; Version: 2.2\n; MaxNodes: 8\n"


def job(jid, submit, run, alloc, req_procs=-1, req_time=-1, user=-1):
    f = [jid, submit, -1, run, alloc, -1, -1, req_procs, req_time, -1, 1, user, -1, -1, 0, -1, -1, -1]
    return " ".join(str(x) for x in f)


def write(tmp_path, lines, header=HEADER):
    p = tmp_path / "t.swf"
    p.write_text(header + "\n".join(lines) + "\n")
    return p


def test_conventions_of_the_scheduler_view(tmp_path):
    """procs = max(alloc, req); req time falls back to run; run<0 -> 10 s; run 0 dropped; sorted by id."""
    p = write(tmp_path, [
        job(3, 30, 100, 2, req_procs=4, req_time=500),
        job(1, 10, -5, 1),
        job(2, 20, 0, 1),
        job(4, 40, 60, 3, req_procs=1),
    ])
    t = read_swf(p)
    assert len(t) == 4 and t.max_nodes == 8 and t.machine_procs == 8
    s = t.for_scheduling()
    assert s.job_id.tolist() == [1, 3, 4]
    assert s.run.tolist() == [10, 100, 60]
    assert s.procs.tolist() == [1, 4, 3]
    assert s.req_time.tolist() == [10, 500, 60]


def test_header_with_comment_after_the_number(tmp_path):
    """'; MaxNodes: 338 (batch partition; 512 total)' reads as 338 (the CTC-SP2 header)."""
    p = write(tmp_path, [job(1, 0, 5, 2)], header="; MaxNodes: 338 (batch partition; 512 total)\n; MaxProcs: 338\n")
    t = read_swf(p)
    assert t.max_nodes == 338 and t.max_procs == 338


@pytest.mark.parametrize("bad, reason", [
    ("1 2 3", "expected 18 fields, found 3"),
    (job(1, 0, 5, 2).replace(" 5 ", " five ", 1), "field 4 is not a number: 'five'"),
])
def test_malformed_line_strict_names_the_line_lenient_skips(tmp_path, bad, reason):
    """Strict mode fails naming the line number; lenient mode skips and counts."""
    p = write(tmp_path, [job(1, 0, 5, 2), bad, job(3, 9, 5, 2)])
    with pytest.raises(InputError, match=rf"t.swf:4: malformed SWF line \({reason}"):
        read_swf(p)
    t = read_swf(p, strict=False)
    assert len(t) == 2 and [n for n, _ in t.skipped] == [4]


def test_job_larger_than_the_machine_suggests_procs(tmp_path):
    """A job asking for more processors than the machine is an error suggesting --procs."""
    p = write(tmp_path, [job(1, 0, 5, 2), job(2, 1, 5, 16)])
    with pytest.raises(InputError, match=r"more processors than the machine's 8.*--procs 16"):
        read_swf(p).for_scheduling()
    assert read_swf(p).for_scheduling(procs=16).procs_total == 16


def test_missing_empty_and_headerless(tmp_path):
    """Missing file, no jobs, and no machine size each get their own message."""
    with pytest.raises(InputError, match="not found"):
        read_swf(tmp_path / "nope.swf")
    with pytest.raises(InputError, match="no job lines"):
        read_swf(write(tmp_path, [], header="; just a comment\n"))
    with pytest.raises(InputError, match="--procs"):
        read_swf(write(tmp_path, [job(1, 0, 5, 2)], header="")).for_scheduling()


def test_real_traces(shared_data):
    """The shared real traces parse, with the machine sizes their headers give."""
    swf = shared_data / "swf"
    lublin = read_swf(swf / "lublin_256.swf")
    assert len(lublin) == 10_000 and lublin.machine_procs == 256
    ctc = read_swf(swf / "CTC-SP2-1996-3.1-cln.swf")
    assert ctc.max_nodes == 338 and len(ctc) == 77_222
    s = ctc.for_scheduling()
    assert s.procs_total == 338 and len(s) == 77_205 and np.all(np.diff(s.job_id) > 0)
