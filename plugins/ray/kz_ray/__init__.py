"""kz_ray: the ``ray`` executor, so ``kz eval --executor ray`` spreads evaluation over the machines of a Ray
cluster (one actor per GPU, or per CPU slot on a cluster without GPUs).

Nothing here imports ray: evaluator workers load this plugin too (they rebuild the ``kz`` process's plugin
set), and they never need it. See docs/ray.md.
"""

from __future__ import annotations

from kzcore import hookimpl


@hookimpl
def kz_register_executors(register):
    from kz_ray.executor import RayPool

    register("ray", RayPool)
