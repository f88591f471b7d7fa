"""Values built once per key in background threads, kept in a bounded LRU (the indexes, corpora and
models of :class:`~hf_dr.serving.SearchEngine`)."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

logger = logging.getLogger(__name__)


class BuildCache:
    """Values built once per key in background threads, kept in a bounded LRU.

    One build per key (a second request for a key being built waits for that build; it never
    starts another), no lock held while building (builds of other keys and look-ups of built keys
    go on), at most ``size`` values kept: the least recently used are dropped (``size=None``:
    unbounded). A failed build is not cached: its error goes to the requests waiting for it, and the
    next request builds again; it is logged unless it is one of ``quiet`` (errors meant for the user).
    """

    class _Job:
        def __init__(self):
            self.done = threading.Event()
            self.value = None
            self.error: BaseException | None = None

    def __init__(self, size: int | None, name: str = "build", quiet: tuple[type[BaseException], ...] = ()):
        self.size = None if size is None else max(1, int(size))
        self.name = name
        self.quiet = tuple(quiet)
        self._mu = threading.Lock()  # guards the two dicts only: never held while building
        self._ready: OrderedDict = OrderedDict()
        self._jobs: dict = {}
        self.evicted = 0

    def __contains__(self, key) -> bool:
        with self._mu:
            return key in self._ready

    def keys(self) -> list:
        with self._mu:
            return list(self._ready)

    def building(self) -> list:
        with self._mu:
            return list(self._jobs)

    def start(self, key, build):
        """The job building ``key`` (started now when none is), or None when ``key`` is built."""
        with self._mu:
            if key in self._ready:
                self._ready.move_to_end(key)
                return None
            job = self._jobs.get(key)
            if job is None:
                job = self._jobs[key] = self._Job()
                threading.Thread(target=self._run, args=(key, job, build), daemon=True,
                                 name=f"hf-dr-{self.name}-{key}").start()
            return job

    def get(self, key, build, wait: float | None = None, on_wait=None):
        """The value of ``key``, built (in the background) when missing; waits at most ``wait``
        seconds (None: as long as it takes), calling ``on_wait(seconds waited)`` every half second,
        then raises :class:`TimeoutError` while the build goes on."""
        with self._mu:
            if key in self._ready:
                self._ready.move_to_end(key)
                return self._ready[key]
        job = self.start(key, build)
        if job is None:
            return self.get(key, build, wait, on_wait)
        t0 = time.monotonic()
        while not job.done.is_set():
            left = None if wait is None else wait - (time.monotonic() - t0)
            if left is not None and left <= 0:
                raise TimeoutError(key)
            job.done.wait(0.5 if left is None else min(0.5, left))
            if on_wait is not None and not job.done.is_set():
                on_wait(time.monotonic() - t0)
        if job.error is not None:
            raise job.error
        return job.value

    def wait_built(self, key, timeout: float | None = None) -> bool:
        """Wait until no build of ``key`` is running; whether ``key`` is then built."""
        with self._mu:
            job = self._jobs.get(key)
        if job is not None:
            job.done.wait(timeout)
        return key in self

    def _run(self, key, job, build) -> None:
        try:
            job.value = build()
        except BaseException as e:  # noqa: BLE001 - handed to the requests waiting for this build
            job.error = e
            if not isinstance(e, self.quiet):
                logger.exception("building %s %r failed", self.name, key)
        with self._mu:
            self._jobs.pop(key, None)
            if job.error is None:
                self._ready[key] = job.value
                self._ready.move_to_end(key)
                while self.size is not None and len(self._ready) > self.size:
                    old, _ = self._ready.popitem(last=False)
                    self.evicted += 1
                    logger.info("evicted %s %r (cache size %d)", self.name, old, self.size)
        job.done.set()
