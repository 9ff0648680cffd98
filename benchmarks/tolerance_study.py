"""How far each precision's outputs are from the fp32 reference, relative to the output's scale:
the measurements behind validators/tolerances.py's defaults.

Reads finished workspaces (e.g. the zoo's: ``python benchmarks/zoo.py --workdir W``) and, for
every (model, format, runner, float output), recomputes from the stored npz files:

* ``scale``: the robust magnitude of the reference output (p99 of |reference| over every sample);
* ``atol/scale``: the smallest atol that passes Polygraphy's rule at the precision's rtol, divided
  by the scale (what the default atol factor must cover);
* ``relL2``: the largest relative L2 error of one sample (batch row), the int8 rule's statistic.

    python benchmarks/tolerance_study.py W [W ...] [--out benchmarks/results/tolerance_study.md]

Prints a table per precision (quantiles over the pairs, the worst pairs by name) and writes it as
markdown. Nothing is run: it reads what verification stored.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _pairs(ws: Path):
    """(model, key, runner, precision, output, [(out, ref)]) of one workspace, all stored comparisons."""
    import yaml

    from navigator.execution.profiling import batch_of
    from navigator.workspace import npz
    from navigator.workspace.layout import Workspace

    w = Workspace(ws)
    st = yaml.safe_load(w.status_path.read_text())
    batch_dim = st.get("batch_dim")
    refs = {p.stem: npz.load(p) for p in w.reference_files()}
    for key, fs in (st.get("formats") or {}).items():
        for rk in fs.get("runners") or {}:
            found: dict[str, list] = {}
            for stem, ref in refs.items():
                path = w.output_file(key, rk, stem)
                if not path.is_file():
                    continue
                items = [(npz.load(path), ref)]
                if batch_dim is not None:
                    items += [(npz.load(p), batch_of(ref, batch_dim, size))
                              for size, p in w.batch_outputs(key, rk, stem)]
                for out, r in items:
                    for name in r:
                        if name in out and r[name].dtype.kind == "f" and out[name].shape == r[name].shape:
                            found.setdefault(name, []).append((out[name], r[name]))
            for name, items in found.items():
                yield st["model"]["name"], key, rk, fs.get("precision", "fp32"), name, items, batch_dim


def measure(ws: Path) -> list[dict]:
    import numpy as np

    from navigator.validators import controls
    from navigator.validators.numeric import diffs
    from navigator.validators.tolerances import TABLE, robust_magnitude

    rows = []
    for model, key, rk, precision, name, items, batch_dim in _pairs(ws):
        scale = robust_magnitude([r for _, r in items])
        rtol = TABLE.get(precision, TABLE["fp32"])[1]
        min_atol, rel_l2, max_abs = 0.0, 0.0, 0.0
        for out, ref in items:
            absdiff, reldiff = diffs(out, ref)
            finite = np.isfinite(absdiff)
            if not finite.any():
                continue
            fail_rel = ~(reldiff <= rtol) & finite
            min_atol = max(min_atol, float(absdiff[fail_rel].max()) if fail_rel.any() else 0.0)
            max_abs = max(max_abs, float(absdiff[finite].max()))
            rel_l2 = max(rel_l2, controls.worst_relative_l2(out, ref, batch_dim))
        rows.append({"model": model, "key": key, "runner": rk, "precision": precision, "output": name,
                     "scale": scale, "max_abs": max_abs, "atol_over_scale": min_atol / scale if scale else None,
                     "rel_l2": rel_l2})
    return rows


def _q(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.quantile(values, q)) if values else float("nan")


def table(rows: list[dict]) -> list[str]:
    from navigator.validators.tolerances import LOSSY, TABLE

    lines = ["| precision | pairs | atol/scale p50 | p90 | max | default factor | fail at default | "
             "relL2 p50 | p90 | max | lossy bound |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for precision in ("fp32", "fp16", "bf16", "int8"):
        sel = [r for r in rows if r["precision"] == precision and r["atol_over_scale"] is not None]
        if not sel:
            continue
        a = [r["atol_over_scale"] for r in sel]
        l2 = [r["rel_l2"] for r in sel]
        factor = TABLE[precision][0]
        over = sum(x > factor for x in a)
        lossy = LOSSY.get(precision)
        lines.append(f"| {precision} | {len(sel)} | {_q(a, .5):.2e} | {_q(a, .9):.2e} | {max(a):.2e} | {factor:g} | "
                     f"{over} | {_q(l2, .5):.3f} | {_q(l2, .9):.3f} | {max(l2):.3f} | "
                     f"{'-' if lossy is None else f'{lossy:g}'} |")
    return lines


def worst(rows: list[dict], precision: str, n: int = 12, by: str = "atol_over_scale") -> list[str]:
    sel = sorted((r for r in rows if r["precision"] == precision and r[by] is not None), key=lambda r: -r[by])[:n]
    lines = ["| model | format | runner | output | scale | max abs | atol/scale | relL2 |", "|---|---|---|---|---|---|---|---|"]
    for r in sel:
        lines.append(f"| {r['model']} | {r['key']} | {r['runner']} | {r['output']} | {r['scale']:.3g} | "
                     f"{r['max_abs']:.3g} | {r['atol_over_scale']:.2e} | {r['rel_l2']:.3f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdirs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for root in args.workdirs:
        for ws in sorted(root.rglob("*.nav.workspace")):
            if (ws / "status.yaml").is_file():
                rows.extend(measure(ws))
    lines = ["# Errors relative to the output's scale, per precision", "",
             f"Workspaces: {', '.join(str(w) for w in args.workdirs)}; {len(rows)} (model, format, runner, output) "
             f"pairs; load average {os.getloadavg()[0]:.2f}.", "",
             "atol/scale: the smallest atol passing Polygraphy's rule at the precision's rtol, over the output's "
             "scale (p99 of |reference|); relL2: the largest relative L2 error of one sample.", ""]
    lines += table(rows)
    for precision in ("fp32", "fp16", "int8"):
        lines += ["", f"## Largest {precision} errors", ""] + worst(rows, precision, by="rel_l2" if precision == "int8"
                                                                      else "atol_over_scale")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
