"""cli/sweeps.py: the sweeps' command lines parse their knob overrides into what the sweeps
take (the gemm sweep's dict, the row sweep's sorted pairs) and refuse an unknown sweep."""

from __future__ import annotations

import pytest

from kernelpro_backend.cli.sweeps import _gemm_knobs, _row_knobs, main


def test_knob_overrides_parse_to_typed_values() -> None:
    assert _gemm_knobs("BLOCK_N=128,LOADS=tma,PERSISTENT=True,") == {
        "BLOCK_N": 128, "LOADS": "tma", "PERSISTENT": True,
    }  # fmt: skip
    assert _row_knobs("num_warps=32 BLOCK_C=2048 EVICT=first") == (
        ("BLOCK_C", 2048), ("EVICT", "first"), ("num_warps", 32),
    )  # fmt: skip


def test_an_unknown_sweep_is_refused() -> None:
    with pytest.raises(SystemExit):
        main(["conv-sweep"])
