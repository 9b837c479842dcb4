"""The Criteo readers' background thread (ext/kraken/prefetch.py): its clean-up wherever it runs."""

from __future__ import annotations

import threading

from torchhpc.ext.kraken.prefetch import prefetched


def test_closing_from_the_worker_thread_does_not_join_itself():
    """The reader's generator may be finalised in its own worker thread (an exception handed over keeps the
    generator's frame alive in its traceback until the worker drops it): its clean-up must not join the
    thread it runs in ("cannot join current thread"), and the worker still stops."""
    holder: dict = {}
    got, closed = threading.Event(), threading.Event()

    def make():
        yield 1
        assert got.wait(5)  # the consumer holds item 1: the generator is suspended at its yield
        holder["gen"].close()  # its finally block runs here, in the worker thread
        closed.set()
        yield 2

    gen = prefetched(make(), depth=1)
    holder["gen"] = gen
    assert next(gen) == 1
    got.set()
    assert closed.wait(5)
    worker = [t for t in threading.enumerate() if t.name == "kraken-criteo-reader"]
    for t in worker:
        t.join(timeout=5)
    assert not any(t.is_alive() for t in worker)
