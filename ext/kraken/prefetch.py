"""Work done ahead in a background thread, handed over through a bounded queue (the Criteo readers' threads)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator


def prefetched(make: Iterator, depth: int) -> Iterator:
    """The items of ``make`` computed in a background thread, at most ``depth`` ahead; its exception is
    raised here after the items before it.  Closing this generator stops the thread."""
    q: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    end = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work():
        try:
            for item in make:
                if not put((item, None)):
                    return
        except BaseException as exc:  # handed to the consumer, raised there
            put((None, exc))
            return
        put((end, None))

    thread = threading.Thread(target=work, name="kraken-criteo-reader", daemon=True)
    thread.start()
    try:
        while True:
            item, exc = q.get()
            if exc is not None:
                raise exc
            if item is end:
                return
            yield item
    finally:
        stop.set()
        # the last reference to this generator can die in the worker itself (an exception it handed over
        # keeps this frame alive in its traceback), so the clean-up may run there: it must not join itself
        if thread is not threading.current_thread():
            thread.join(timeout=5)


__all__ = ["prefetched"]
