"""The offline warm-up: every subgraph of a model searched before the runs that need it
(offline), what it found per subgraph (rows), and the in-context check of a whole step: the
kernels found must also make the step faster (incontext, timed by incontext_steps).

Must not: search or cache by itself (tuner/ assembles the provider that does).

    from kernelpro_backend.warmup import warmup
"""

from .offline import WarmupReport, warmup

__all__ = ["WarmupReport", "warmup"]
