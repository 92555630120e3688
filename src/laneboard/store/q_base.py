"""The primitives every query mixin of ``Tx`` (``store.tx``) builds on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from laneboard.store.base import Row

if TYPE_CHECKING:
    from laneboard.store.base import Store


class Queries:
    """Base of the query mixins: ``Tx`` defines ``pg``, ``now`` and the raw statements."""

    pg: bool
    store: Store

    if TYPE_CHECKING:

        def now(self) -> int: ...

        def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

        def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

        def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any: ...

        def run(self, sql: str, params: Sequence[Any] = ()) -> int: ...
