"""The worker lets glibc keep freed blocks of up to 32 MB (worker/recall_index/release.py
`keep_freed_blocks`): a thread that makes and frees a recall's temporaries over a million rows
again and again then takes almost no page faults, where it took thousands each time."""

from __future__ import annotations

import subprocess
import sys

import pytest

from worker.recall_index.release import malloc_trim

SCRIPT = """
import resource, sys, threading
import numpy as np
from worker.recall_index.release import keep_freed_blocks
if sys.argv[1] == "kept":
    assert keep_freed_blocks()
faults = []

def recalls():
    codes = np.ones((2, 1_000_000), dtype=np.uint64)
    for _ in range(30):
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        scratch = np.bitwise_xor(codes[0], codes[1])  # 8 MB
        counts = np.bitwise_count(scratch)  # 1 MB
        estimate = counts.astype(np.float32) + np.float32(1)  # 4 MB
        order = estimate.astype(np.float64) * 2  # 8 MB
        del scratch, counts, estimate, order
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)

thread = threading.Thread(target=recalls)
thread.start()
thread.join()
print(sorted(faults[10:])[10])
"""


def faults_per_round(setting: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, setting], capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip())


@pytest.mark.skipif(malloc_trim() is None, reason="glibc's malloc only")
def test_a_thread_that_frees_a_recalls_temporaries_reuses_them_without_page_faults() -> None:
    kept, default = faults_per_round("kept"), faults_per_round("default")
    assert default > 1000, f"glibc's default gave back the blocks: {default} faults a round"
    assert kept < 50, f"{kept} page faults a round with freed blocks kept"
