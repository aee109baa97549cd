"""Fair dispatch: which (priority class, table) queue is served next.

Pure decisions, no I/O. The caller describes the queues as they are right now (one :class:`Head` per
non-empty queue, marked ``blocked`` when its table is at its concurrency limit) and
:class:`FairScheduler` answers with a :class:`Pick`. Three mechanisms are combined, in this order:

1. **Aging** (``max_wait``): an unblocked queue that has waited ``max_wait`` or longer since it was last
   served (or first seen backlogged, or last blocked) is served first, the longest-waiting first. This
   is the bound that holds whatever else happens, including a flood in an urgent class.
2. **Fixed Priority Preemptive**: classes marked ``urgent`` are served before every other class, in the
   order they were given, whenever they have an eligible head.
3. **Weighted fair sharing**: classes share by weight with Deficit Weighted Round Robin (or smooth
   Weighted Round Robin); inside a class, tenants (optional) and then tables share by weight the same way.

Time is either the caller's clock (e.g. ``time.time``) or, when no clock is given, the number of picks
the scheduler has made, so that bounds can be stated and tested in dispatches.

Bounds a caller may rely on (unit costs, DRR at both levels, no tenant level):

* a queue that becomes backlogged in a non-urgent class while no urgent class is backlogged is served
  within :meth:`FairScheduler.fair_wait_bound` dispatches, however long any other queue is
  (a burst of 5,000 items for one table counts as one queue);
* with ``max_wait = M`` in dispatches, every queue that stays eligible is served within ``M + Q``
  dispatches, where ``Q`` is the number of distinct queues (:meth:`FairScheduler.aged_wait_bound`).
"""


from __future__ import annotations

from autooptimize.domain.fairness.scheduler import (
    FairScheduler,
    Head,
    Pick,
    PickReason,
    PriorityClass,
    namespace_of,
)
from autooptimize.domain.fairness.selectors import DeficitRoundRobin, Policy, Selector, WeightedRoundRobin
from autooptimize.domain.fairness.tenants import (
    TenantCaps,
    check_tenant,
    default_tenant,
    parse_tenant_caps,
    parse_tenant_weights,
    tenant_of_table,
)

__all__ = [
    "DeficitRoundRobin",
    "FairScheduler",
    "Head",
    "Pick",
    "PickReason",
    "Policy",
    "PriorityClass",
    "Selector",
    "TenantCaps",
    "WeightedRoundRobin",
    "check_tenant",
    "default_tenant",
    "namespace_of",
    "parse_tenant_caps",
    "parse_tenant_weights",
    "tenant_of_table",
]
