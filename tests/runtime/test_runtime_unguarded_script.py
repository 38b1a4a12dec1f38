"""A user script without an `if __name__ == "__main__"` guard must not run again in workers."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_workers_do_not_rerun_the_callers_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            from kernelpro_backend.runtime import WorkerPool, Job, SourceCandidate
            from kernelpro_backend import make_backend

            print("SCRIPT-BODY-RAN", flush=True)
            found = []
            with torch.no_grad():
                torch.compile(lambda x: (x * 3).exp(), backend=make_backend(
                    observer=lambda k, s: found.extend(s)),
                    options={"fallback": "eager", "search": "off"})(torch.randn(8))
            src = "def entry(x):\\n    return [(x * 3).exp()]\\n"
            with WorkerPool(workers=1, timeout_s=120) as pool:
                r = pool.evaluate(Job.from_subgraph(found[0], SourceCandidate("triton", src, "entry")))
            print("STATUS", r.status.value, flush=True)
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("SCRIPT-BODY-RAN") == 1
    assert "STATUS ok" in proc.stdout
