"""A lazily started process pool owned by an object used as a context manager."""

from __future__ import annotations


class OwnsWorkerPool:
    """Mixin for objects that start ``self._pool`` (a ``ProcessPoolExecutor``) on first use:
    ``close()`` shuts it down, and ``with obj:`` closes it on exit."""

    _pool = None

    def close(self) -> None:
        """Shut down the worker processes (started by the first multi-worker call)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
