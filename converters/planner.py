"""The planner: which edges to run, in which order, to reach each target."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from navigator.errors import UserInputError


@dataclass(frozen=True)
class PlannedFormat:
    key: str
    parent: str | None
    converter: type | None          # None for the source artifact itself
    requested: bool


def plan(source: str, targets: list[str], edges: list[type]) -> list[PlannedFormat]:
    """Shortest paths from ``source`` to every target, merged, parents first.

    Raises UserInputError naming the valid targets when one cannot be reached."""
    by_source: dict[str, list[type]] = {}
    for edge in sorted(edges, key=lambda e: e.name):
        by_source.setdefault(edge.source, []).append(edge)
    # BFS: came_from[key] = edge that produced it
    came_from: dict[str, type | None] = {source: None}
    queue = deque([source])
    while queue:
        key = queue.popleft()
        for edge in by_source.get(key, []):
            if edge.target not in came_from:
                came_from[edge.target] = edge
                queue.append(edge.target)
    unreachable = [t for t in targets if t not in came_from]
    if unreachable:
        reachable = sorted(came_from)
        raise UserInputError(f"unknown or unreachable target {unreachable[0]!r} from a {source} source; "
                             f"valid targets: {', '.join(reachable)}")
    order: list[str] = []
    for target in targets:
        chain = []
        key = target
        while key is not None and key not in order and key not in chain:
            chain.append(key)
            edge = came_from[key]
            key = edge.source if edge is not None else None
        order.extend(reversed(chain))
    requested = set(targets)
    out = []
    for key in order:
        edge = came_from[key]
        out.append(PlannedFormat(key=key, parent=edge.source if edge else None, converter=edge,
                                 requested=key in requested))
    return out
