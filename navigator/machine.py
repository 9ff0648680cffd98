"""What this machine (or container) offers, read from /proc and the cgroup: the base layer's
facts that configuration defaults and the scheduler both need."""

from __future__ import annotations

from pathlib import Path

GIB = 1 << 30


def physical_memory_bytes() -> int | None:
    """Memory this process may use: MemTotal, or a smaller cgroup limit (v2 or v1)."""
    total = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) > 0 and (total is None or int(text) < total):
            total = int(text)
    return total


def default_memory_limit_gb() -> float | None:
    """75% of the machine's (or container's) memory, in GiB; None when unknown."""
    total = physical_memory_bytes()
    return round(total * 0.75 / GIB, 1) if total else None
