"""The rows of several probe.py runs ($OUT/<model>/warmup_corpus.json) as one JSON in issue 57's
form, written to $OUT/real-models.json, and a table with each model's speedup over Inductor and
their geomean (only models with both times).

    python docs/gpu_runs/2026-12-06-warmup-corpus/merge.py OUT
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

KEYS = ("eager_ms", "inductor_ms", "kernelpro_ms", "inductor_peak_mib", "kernelpro_peak_mib")


def merged(out: Path) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    for path in sorted(out.glob("*/warmup_corpus.json")):
        for model, row in json.loads(path.read_text()).items():
            rows[model] = {k: row.get(k) for k in (*KEYS, "warmup_s")}
    return rows


def _formatter(row: dict):
    def f(key: str, spec: str = ".2f") -> str:
        return "-" if row.get(key) is None else format(row[key], spec)

    return f


def table(rows: dict[str, dict]) -> str:
    lines = [f"{'model':22} {'eager':>9} {'Inductor':>9} {'kernelpro':>9} {'x Ind':>6} "
             f"{'peak MiB Ind/kp':>17} {'warm-up s':>9}"]  # fmt: skip
    speedups = []
    for model, r in rows.items():
        x = None
        if r["inductor_ms"] and r["kernelpro_ms"]:
            x = r["inductor_ms"] / r["kernelpro_ms"]
            speedups.append(x)
        f = _formatter(r)

        lines.append(
            f"{model:22} {f('eager_ms'):>9} {f('inductor_ms'):>9} {f('kernelpro_ms'):>9} "
            f"{'-' if x is None else f'{x:.2f}x':>6} "
            f"{f('inductor_peak_mib', '.0f') + ' / ' + f('kernelpro_peak_mib', '.0f'):>17} "
            f"{f('warmup_s', '.0f'):>9}"
        )
    if speedups:
        geo = math.exp(sum(math.log(x) for x in speedups) / len(speedups))
        lines.append(f"geomean over Inductor: {geo:.3f}x ({len(speedups)} models)")
    return "\n".join(lines)


def main() -> None:
    out = Path(sys.argv[1])
    rows = merged(out)
    (out / "real-models.json").write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
