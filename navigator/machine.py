"""What this machine (or container) offers, read from /proc and the cgroup: the base layer's
facts that configuration defaults and the scheduler both need."""

from __future__ import annotations

import os
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


class CpuUse:
    """CPU time spent on this process's cores, split into this process's own (with every descendant,
    live or reaped) and everyone else's. :meth:`others_since` is how many of the cores other
    processes kept busy between two samples: what the scheduler subtracts from the core count."""

    def __init__(self, wall: float, busy_s: float, ours_s: float, root: int | None = None):
        self.wall, self.busy_s, self.ours_s, self.root = wall, busy_s, ours_s, root

    @classmethod
    def now(cls, root: int | None = None) -> CpuUse:
        """``root``: the process whose tree counts as ours (a worker passes its run's calling
        process); None: this process's."""
        import time

        return cls(time.monotonic(), _busy_seconds(), _our_seconds(root), root)

    def others_since(self, earlier: CpuUse) -> float | None:
        """Cores busy with other processes on average since ``earlier``; None when unknown (no
        /proc/stat) or the two samples are too close to tell."""
        wall = self.wall - earlier.wall
        if wall < 0.05 or min(self.busy_s, earlier.busy_s, self.ours_s, earlier.ours_s) < 0:
            return None
        return max(0.0, (self.busy_s - earlier.busy_s) - (self.ours_s - earlier.ours_s)) / wall


def _busy_seconds() -> float:
    """Non-idle time of the cores this process may run on (/proc/stat), -1 where unreadable."""
    import os

    try:
        allowed = {f"cpu{n}" for n in os.sched_getaffinity(0)}
        tick = os.sysconf("SC_CLK_TCK")
        busy = 0
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] in allowed:   # user nice system idle iowait irq softirq steal
                    busy += sum(int(x) for x in fields[1:9]) - int(fields[4]) - int(fields[5])
        return busy / tick
    except (OSError, ValueError, AttributeError, IndexError):
        return -1.0


def _our_seconds(root: int | None = None) -> float:
    """CPU time of this process (or ``root``), its reaped children and its live descendants (theirs
    with what they reaped), from os.times and /proc/<pid>/stat."""
    import os

    me = os.getpid() if root is None else root
    if me == os.getpid():
        t = os.times()
        total = t.user + t.system + t.children_user + t.children_system
    else:
        total = 0.0   # read with the others from /proc below
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    try:
        tick = os.sysconf("SC_CLK_TCK")
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    text = f.read()
                fields = text[text.rfind(b")") + 2:].split()   # after "pid (comm) ": state ppid ...
                ppid, used = int(fields[1]), sum(int(x) for x in fields[11:15]) / tick   # utime stime cutime cstime
            except (OSError, ValueError, IndexError):      # ended meanwhile, or unreadable: skipped
                continue
            parents[int(entry.name)], times[int(entry.name)] = ppid, used
    except (OSError, ValueError):
        return total if me == os.getpid() else -1.0
    if me != os.getpid():
        if me not in times:
            return -1.0   # gone: unknown
        total += times[me]
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    stack = list(children.get(me, ()))
    while stack:
        pid = stack.pop()
        total += times.get(pid, 0.0)
        stack.extend(children.get(pid, ()))
    return total


def affinity_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
