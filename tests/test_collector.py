"""The daemon's garbage collector settings (worker/app.py settle_collector)."""

from __future__ import annotations

import gc

from worker.app import GC_YOUNGEST, settle_collector


def test_settled_collector_freezes_start_up_and_widens_the_youngest_generation() -> None:
    """After settle_collector, what existed is frozen out of the collector's walks and the
    youngest generation holds GC_YOUNGEST objects; the older generations keep their ratios."""
    threshold = gc.get_threshold()
    try:
        gc.unfreeze()
        settle_collector()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GC_YOUNGEST, threshold[1], threshold[2])
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
