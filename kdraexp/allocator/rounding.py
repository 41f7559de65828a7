"""What a request consumes of a device shared by capacity, rounded as the allocator rounds it.

A device with ``allowMultipleAllocations: true`` is shared by its capacities, and a request does
not consume of each what it asks (``capacity.requests``).  The 1.37 allocator
(``structured/internal/experimental/consumable_capacity.go``: ``calculateConsumedCapacity``, then
``violatesPolicy``) makes it: a capacity the request does not name consumes its policy's
``default``, else the whole capacity; one it names without a policy consumes what it asks; with a
``validRange`` what it asks is rounded up to ``min``, then to the next ``step`` from ``min``; with
``validValues``, to the first value at least as large.  The policy refuses an amount above
``validRange.max``, off the steps, or not among ``validValues`` (above every one), and the device
is then not eligible, as it is when it lacks a capacity the request names or when what it has left
is less than the amount.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

from kdraexp.allocator.facts import NOTHING, TOLERANCE, DeviceFacts
from kdraexp.dra.gated import RequestPolicy

NOTHING_ROUNDS: Mapping[str, RequestPolicy] = MappingProxyType({})
"""A device none of whose capacities has a policy that rounds (one read-only mapping for all)."""
_INT64 = float(2**63 - 1)


def consumption(device: DeviceFacts, asked: Mapping[str, float]) -> dict[str, float] | None:
    """What a request asking *asked* consumes of each of the device's capacities.

    None when the device can never give it that: it lacks a capacity asked, or a policy refuses
    the amount.  *device* allows multiple allocations (it has capacities).
    """
    capacities = device.capacities or NOTHING
    for name in asked:
        if name not in capacities:
            return None
    policies = device.policies or NOTHING_ROUNDS
    defaults = device.defaults or NOTHING
    found = {}
    for name, value in capacities.items():
        policy = policies.get(name)
        want = asked.get(name)
        if policy is None:  # consumed as asked; else its default, if any, else all of it
            found[name] = defaults.get(name, value) if want is None else want
            continue
        amount = consumed(policy, value, want)
        if amount is None:
            return None
        found[name] = amount
    return found


def consumed(policy: RequestPolicy, value: float, asked: float | None) -> float | None:
    """What a request asking *asked* (None: naming it not) consumes of a capacity of *value*.

    None when the policy refuses the amount.
    """
    if asked is None:
        if policy.default is not None:
            return policy.default  # never refused
        amount: float | None = value
    elif policy.ranged and policy.min is not None:
        amount = _round_up_range(policy, policy.min, asked)
    elif policy.values:
        amount = next((valid for valid in policy.values if asked <= valid), asked)
    else:
        amount = asked
    return None if amount is None or refuses(policy, amount) else amount


def _round_up_range(policy: RequestPolicy, low: float, asked: float) -> float | None:
    """*asked* up to ``min``, then up to the next step from it.

    None where the allocator cannot represent the request or its rounding (past an int64, or
    of thousandths, when it works in them): it gives up the claim then.  None too for a step
    no arithmetic can round by (not above zero, which the API refuses).
    """
    if asked <= low:
        return low
    if policy.step is None:
        return asked
    scale = 1000 if policy.milli else 1
    if asked * scale > _INT64 or (policy.milli and not _whole(asked * scale)):
        return None
    steps = policy.steps(asked)
    if steps is None:
        return None
    steps = math.ceil(steps - TOLERANCE)
    rounded = low + steps * policy.step
    return None if rounded * scale > _INT64 else rounded


def refuses(policy: RequestPolicy, amount: float) -> bool:
    """Whether the policy refuses to let a request consume *amount* (``violatesPolicy``)."""
    if policy.default is not None and _close(amount, policy.default):
        return False
    if policy.ranged:
        if policy.max is not None and amount > policy.max * (1 + TOLERANCE):
            return True
        if policy.step is not None and policy.min is not None:
            steps = policy.steps(amount)
            return steps is None or not _whole(steps)
        return False
    if policy.values:
        return not any(_close(amount, valid) for valid in policy.values)
    return False


def fits(device: DeviceFacts, asked: Mapping[str, float], used: Mapping[str, float]) -> bool:
    """Whether what the device has left, *used* taken, covers what the request consumes."""
    need = consumption(device, asked)
    return need is not None and room(device, need, used)


def room(device: DeviceFacts, need: Mapping[str, float], used: Mapping[str, float]) -> bool:
    """Whether what the device has left, *used* taken, covers *need* (see :func:`consumption`)."""
    capacities = device.capacities or NOTHING
    for name, amount in need.items():
        if amount - (capacities[name] - used.get(name, 0.0)) > TOLERANCE * max(1.0, amount):
            return False
    return True


def _whole(number: float) -> bool:
    return abs(number - round(number)) <= TOLERANCE * max(1.0, abs(number))


def _close(one: float, other: float) -> bool:
    return abs(one - other) <= TOLERANCE * max(1.0, abs(one), abs(other))
