"""Nsight Compute: which metrics to ask for, and parsing its CSV into numbers per launch.

Owns: the metric names (ncu 2025.x, Hopper), `parse_ncu_csv` for both `--page raw` (one
row per launch, one column per metric, a units row under the header) and `--page details`
(one row per metric: "Metric Name", "Metric Unit", "Metric Value").
Must not: run ncu or judge the numbers (ncu.py does).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re

# Always asked for: present on every ncu since 2020 and on every architecture we target.
CORE_METRICS = (
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_blocks",
    "launch__occupancy_limit_warps",
    "launch__waves_per_multiprocessor",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "launch__grid_size",
    "launch__block_size",
    "device__attribute_multiprocessor_count",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "lts__t_sector_hit_rate.pct",
    "l1tex__t_sector_hit_rate.pct",
)

STALL_REASONS = (
    "long_scoreboard",  # waiting on global/local memory
    "short_scoreboard",  # waiting on shared memory / MUFU
    "wait",  # fixed-latency dependency
    "barrier",  # __syncthreads / tl.debug_barrier
    "mio_throttle",  # shared-memory instruction queue full
    "lg_throttle",  # global/local instruction queue full (many narrow accesses)
    "math_pipe_throttle",  # a math pipe is saturated
    "not_selected",  # eligible but another warp issued: enough parallelism
    "no_instruction",  # instruction cache miss
    "membar",
)


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


# Asked for too, but dropped (with a retry) if this ncu or GPU does not know them.
OPTIONAL_METRICS = (
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    *(stall_metric(r) for r in STALL_REASONS),
)

ALL_METRICS = CORE_METRICS + OPTIONAL_METRICS


@dataclasses.dataclass(frozen=True)
class NcuLaunch:
    """The metrics of one profiled kernel launch; values ncu could not collect are absent."""

    kernel_name: str
    metrics: dict[str, float]
    texts: dict[str, str]  # non-numeric values as printed, e.g. launch dims "(128, 1, 1)"

    def get(self, name: str) -> float | None:
        return self.metrics.get(name)


_NUMBER = re.compile(r"^[-+]?[\d,]*\.?\d+(?:[eE][-+]?\d+)?$")


def parse_value(text: str) -> float | None:
    """ncu prints "1,048,576", "85.32", "4.0e-05", "n/a" or ""; numbers come back as float."""
    text = text.strip()
    if not text or not _NUMBER.match(text):
        return None
    return float(text.replace(",", ""))


def _csv_block(text: str) -> list[list[str]]:
    """The CSV rows from the header (`"ID",...`) on; program output and ==PROF== lines dropped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    body = [line for line in lines[start:] if line.startswith('"')]
    return list(csv.reader(io.StringIO("\n".join(body))))


def parse_ncu_csv(text: str) -> list[NcuLaunch]:
    """All launches in an `ncu --csv` output, in order. Empty when ncu profiled nothing."""
    rows = _csv_block(text)
    if not rows:
        return []
    header = rows[0]
    col = {name: i for i, name in enumerate(header)}
    if "Metric Name" in col:
        return _parse_long(rows[1:], col)
    data = rows[1:]
    if data and data[0] and data[0][0] == "":  # the units row of --page raw
        data = data[1:]
    launches = []
    meta = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream"}
    for row in data:
        if len(row) != len(header):
            continue
        metrics: dict[str, float] = {}
        texts: dict[str, str] = {}
        for name, raw in zip(header, row, strict=True):
            if name in meta:
                continue
            value = parse_value(raw)
            if value is None:
                texts[name] = raw
            else:
                metrics[name] = value
        launches.append(NcuLaunch(row[col["Kernel Name"]], metrics, texts))
    return launches


def _parse_long(rows: list[list[str]], col: dict[str, int]) -> list[NcuLaunch]:
    by_id: dict[str, NcuLaunch] = {}
    for row in rows:
        if len(row) < len(col):
            continue
        launch_id = row[col["ID"]]
        launch = by_id.setdefault(launch_id, NcuLaunch(row[col["Kernel Name"]], {}, {}))
        name, raw = row[col["Metric Name"]], row[col["Metric Value"]]
        value = parse_value(raw)
        if value is None:
            launch.texts[name] = raw
        else:
            launch.metrics[name] = value
    return list(by_id.values())


def unknown_metrics(ncu_output: str, requested: tuple[str, ...]) -> set[str]:
    """Requested metrics that ncu's error lines name (e.g. "Failed to find metric X")."""
    errors = [line for line in ncu_output.splitlines() if "ERROR" in line or "rror" in line]
    text = "\n".join(errors)
    return {m for m in requested if m in text or m.split(".")[0] in text}
