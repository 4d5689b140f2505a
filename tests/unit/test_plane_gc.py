"""Issue 27 (router CPU): the worker's garbage-collector tuning freezes the start-up objects and raises the
young-generation threshold, so the batch loop's Message objects no longer trigger collections."""

from __future__ import annotations

import gc

from router.plane_parts import GC_THRESHOLDS, tune_gc


def test_tune_gc_freezes_start_up_objects_and_raises_the_young_threshold() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert GC_THRESHOLDS[0] > 2 * 20_000  # two default batches of Messages do not trigger a young collection
        assert gc.get_freeze_count() > 0
        assert gc.isenabled()  # rare collections, not none: cycles are still found
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
