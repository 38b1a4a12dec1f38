"""The GEMM sweep's summary table (bench/gemm_sweep.py writes the full rows as JSON).

Owns: `summary(case)` (one case's headline figures), `table(meta, results)` and
`merge(runs)` (the sweeps of one machine, run one per GPU or call, as one run).
Must not: measure anything.
"""

from __future__ import annotations

from typing import Any

from ..text_table import format_table


def _ok(case: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in case.get("configs", []) if r.get("status") == "ok"]


def summary(case: dict[str, Any]) -> dict[str, Any]:
    """Seed (default knobs), the fastest configuration tried, the search's best, and speedups
    as baseline time / ours (> 1: ours is faster)."""
    ok = _ok(case)
    seed = next((r for r in ok if r["kind"] == "default"), None)
    best = min(ok, key=lambda r: r["ms"]) if ok else None
    out: dict[str, Any] = {
        "seed_ms": seed["ms"] if seed else None,
        "best_ms": best["ms"] if best else None,
        "best_config": best["config"] if best else None,
    }
    search = case.get("search") or {}
    if search.get("best_candidate_ms"):
        out["search_ms"] = search["best_candidate_ms"]
        out["search_trials"] = search.get("trials")
        if search.get("inductor_ms"):  # the search's best against its own Inductor baseline
            out["search_x_inductor"] = round(search["inductor_ms"] / out["search_ms"], 3)
    if search and "kept_kernel" in search:
        out.update(_after_search(case, search))
    # "ours" is timed by the sweep's own timer only, as its baselines are: the best
    # configuration, or the kept kernel re-timed here (the search's figures are its own)
    ours = [v for v in (out["best_ms"], out.get("kept_ms")) if v]
    ours_ms = min(ours) if ours else None
    out["ours_ms"] = ours_ms
    for base in ("cublas", "eager", "inductor", "max_autotune"):
        if ours_ms and case.get(f"{base}_ms"):
            out[f"x_{base}"] = round(case[f"{base}_ms"] / ours_ms, 3)
    if seed and case.get("cublas_ms"):
        out["seed_of_cublas"] = round(case["cublas_ms"] / seed["ms"], 3)
    if best and case.get("roof_tflops"):
        out["sol"] = round(best["tflops"] / case["roof_tflops"], 3)
    if best and "eager_max_abs_error" in best:
        out["max_abs_error"] = best["max_abs_error"]
        out["ieee_max_abs_error"] = best["eager_max_abs_error"]
    return out


def _after_search(case: dict[str, Any], search: dict[str, Any]) -> dict[str, Any]:
    """What a user gets after the search: the kept kernel against Inductor, both by the sweep's
    timer when the sweep re-timed it ("sweep"), else both in the search's pool ("search"), or
    the fallback itself (1.00x by construction)."""
    kept = bool(search["kept_kernel"])
    out: dict[str, Any] = {"kept": kept, "after_x_inductor": 1.0, "after_timer": None}
    if search.get("kept_error"):
        out["kept_error"] = search["kept_error"]
    elif kept and search.get("kept_ms") and case.get("inductor_ms"):
        out["kept_ms"] = search["kept_ms"]
        out["after_x_inductor"] = round(case["inductor_ms"] / search["kept_ms"], 3)
        out["after_timer"] = "sweep"
    elif kept and search.get("winner_ms") and search.get("inductor_ms"):
        out["after_x_inductor"] = round(search["inductor_ms"] / search["winner_ms"], 3)
        out["after_timer"] = "search"
    return out


def _f(value: Any, fmt: str = "{:.4f}") -> str:
    return "-" if value is None else fmt.format(value)


def _after(s: dict[str, Any]) -> str:
    if "kept" not in s:
        return "-"
    if "kept_error" in s:
        return "kept kernel " + s["kept_error"][:40]
    if not s["kept"]:
        return "1.00x (fallback)"
    timer = " in search" if s["after_timer"] == "search" else ""
    return f"{s['after_x_inductor']:.2f}x (kept{timer})"


def table(meta: dict[str, Any], results: list[dict[str, Any]]) -> str:
    head = ["case", "cuBLAS", "eager", "Inductor", "max-at", "seed", "best", "search (trials) x its Ind.",
            "seed/cuBLAS", "x Inductor", "x cuBLAS", "SOL", "err / IEEE err",
            "after search"]  # fmt: skip
    rows = []
    for c in results:
        if "error" in c:
            rows.append([c["case"], c["error"][:60]] + [""] * (len(head) - 2))
            continue
        s = summary(c)
        search = "-"
        if "search_ms" in s:
            search = f"{s['search_ms']:.4f} ({s['search_trials']})"
            if "search_x_inductor" in s:
                search += f" {s['search_x_inductor']:.2f}x"
        elif c.get("search"):
            search = str(c["search"].get("error") or c["search"].get("skipped") or "none")[:24]
        err = "-"
        if "max_abs_error" in s:
            err = f"{s['max_abs_error']:.2e} / {s['ieee_max_abs_error']:.2e}"
        rows.append([
            c["case"], _f(c.get("cublas_ms")), _f(c.get("eager_ms")), _f(c.get("inductor_ms")),
            _f(c.get("max_autotune_ms")), _f(s["seed_ms"]), _f(s["best_ms"]), search,
            _f(s.get("seed_of_cublas"), "{:.2f}"), _f(s.get("x_inductor"), "{:.2f}"),
            _f(s.get("x_cublas"), "{:.2f}"), _f(s.get("sol"), "{:.0%}"), err, _after(s),
        ])  # fmt: skip
    title = f"{meta['device']}  torch {meta['torch']}  triton {meta['triton']}  {meta['date']}"
    note = (
        "ms: medians; eager: the subgraph's ATen ops; x = baseline time / ours (ours: the best config or the kept "
        "kernel, by this sweep's timer); search: its best in its own pool, x its own Inductor baseline; seed/cuBLAS = "
        "cuBLAS time / seed time; SOL: best config's TFLOP/s over the measured roof; after search: the kept kernel "
        're-timed here x Inductor ("in search": both in the search\'s pool), or the fallback (1.00x)'
    )
    return "\n".join([title, format_table(head, rows), note])


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several sweep runs ({"meta", "results"}) as one: every case once, a case a later run
    measured replacing an earlier run's "skipped" or error row, the runs' metas kept. Runs of
    different devices, torch or Triton versions are not one table: ValueError."""
    if not runs:
        raise ValueError("no sweep runs to merge")
    keys = ("device", "torch", "triton")
    first = runs[0]["meta"]
    for run in runs[1:]:
        differ = [k for k in keys if run["meta"].get(k) != first.get(k)]
        if differ:
            raise ValueError(f"runs differ in {', '.join(differ)}: not one table")
    results: dict[str, dict[str, Any]] = {}
    for run in runs:
        for case in run["results"]:
            kept = results.get(case["case"])
            if kept is None or ("error" in kept and "error" not in case):
                results[case["case"]] = case
    meta = {k: first.get(k) for k in keys}
    meta["date"] = " / ".join(sorted({str(r["meta"].get("date")) for r in runs}))
    meta["runs"] = [r["meta"] for r in runs]
    return {"meta": meta, "results": list(results.values())}
