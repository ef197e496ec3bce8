"""What the PostgreSQL and MySQL backends share: one connection to a database server, closed once.

Imports nothing of ours, so every backend module may use it.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)


class OneConnection:
    """`close` and `repr` of a backend holding one connection (``_conn``, None when there is none).

    A closed backend refuses writes (``_closed``, checked by the backend); a failing close is logged
    at DEBUG, not raised, so that closing the pipeline always gets through.
    """

    KIND = ""  # the server in log lines: "PostgreSQL", "MySQL"
    masked: str  # the storage URL without its password
    _conn: Any
    _closed: bool

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # pragma: no cover - best effort
                logger.debug("Error closing %s storage %s", self.KIND, self.masked, exc_info=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.masked!r})"
