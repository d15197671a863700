"""``pool.map``: many runs over every actor, with back-pressure (``max_in_flight`` messages queued at each) and batches."""

from __future__ import annotations

import collections
from typing import Any, Optional

import ray
import ray.exceptions

from ._slots import Slot, Slots


def map_runs(slots: Slots, argvs: list[list[str]], kw: dict[str, Any], batch: Optional[int], max_in_flight: int) -> list[Any]:
    """The results of ``argvs`` run with ``kw`` (checked), in their order: each a
    `Completed`, or the `ActorLost` of a run whose actor died; an argument error raises.
    ``batch`` programs go in one message (None: chosen from the counts), and at most
    ``max_in_flight`` messages wait at one actor."""
    n = len(argvs)
    results: list[Any] = [None] * n
    if n == 0:
        return results
    if batch is None:
        # Enough messages for every actor to stay busy (4 rounds of max_in_flight), no
        # more than 32 runs each: a message costs about 2.5 ms of CPU (driver, actor,
        # Ray's threads) against 5-10 ms for a small guest.
        batch = max(1, min(32, n // (4 * len(slots.all) * max_in_flight)))
    bundle = slots.bundle(kw)
    wire = bundle.wire()
    todo = collections.deque(range(0, n, batch))
    inflight: dict[Any, tuple[list[int], Slot, Any, str, int]] = {}
    try:
        while todo or inflight:
            with slots.lock:
                if slots.closed:
                    raise RuntimeError("this SandboxPool is closed")
                for slot in sorted(slots.all, key=lambda s: s.in_flight):
                    while todo and slot.in_flight < max_in_flight:
                        start = todo.popleft()
                        idx = list(range(start, min(start + batch, n)))
                        ref = slot.actor.run_many.remote([(argvs[i], kw) for i in idx], wire)
                        slot.in_flight += 1
                        inflight[ref] = (idx, slot, slot.actor, slot.name, slot.generation)
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                idx, slot, actor, name, gen = inflight.pop(ref)
                slots.done(slot, gen)
                try:
                    outs = ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    err = slots.lost(slot, actor, name, e)
                    for i in idx:
                        results[i] = err
                    continue
                for i, out in zip(idx, outs):
                    results[i] = bundle.result(out)  # an argument error raises
    except BaseException:
        for ref in inflight:
            ray.cancel(ref)
        raise
    finally:
        bundle.release()
    return results
