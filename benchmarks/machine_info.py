"""What the benchmark scripts record about the machine they ran on (one place for all of them)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def mem_gib() -> float | None:
    """Total memory, GiB (None where /proc/meminfo is not readable)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def summary() -> dict:
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "ram_gib": mem_gib(), "python": platform.python_version(),
            "os": platform.platform()}


def one_line() -> str:
    mem = mem_gib()
    return (f"{cpu_name()}, {os.cpu_count()} cores, {mem if mem is not None else float('nan'):.1f} GiB RAM, "
            f"Python {platform.python_version()}, {platform.platform()}")


def publish(title: str, how: str, body: list[str], out: Path | None) -> str:
    """A results page: the title, how it was made (command, model, machine), the body; printed, and
    written to ``out`` when given."""
    text = "\n".join([f"# {title}", "", how, "", *body, ""])
    print(text)
    if out:
        out.write_text(text)
    return text
