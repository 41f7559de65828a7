"""Reading the fields that may be absent, null, empty or of another shape on a real cluster.

Feature-gated fields (taints, counters, consumed capacity, device status) and the values inside
attributes and capacities arrive undecoded.  Each reader here returns what it can read and reports
each value it cannot, so one odd value costs that value alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import msgspec

from kdraexp.dra.problems import Problems
from kdraexp.dra.quantity import QuantityError, parse_quantity, parse_quantity_exact

TAINT_EFFECTS = frozenset({"None", "NoSchedule", "NoExecute"})
"""The effects a device taint may have; "Consumers must treat unknown effects like None"."""
CONDITION_STATUSES = {"True": "true", "False": "false", "Unknown": "unknown"}
VALID_VALUES = 10
"""The most ``validValues`` a capacity's ``requestPolicy`` may list (the API server's bound)."""
BINDING_CONDITIONS = 4
"""The most ``bindingConditions`` (and ``bindingFailureConditions``) a device may have (the API
server's bound): past it, the rest are not kept (200,000 of them in each of 12 claims' results
took the exporter past its memory limit in a second)."""

_decode = msgspec.json.decode


class Unreadable(ValueError):
    """A value of the wrong shape; the message says what was expected."""


def raw_value(raw: msgspec.Raw | None) -> Any:
    """Decode one undecoded value; None when absent or null.

    :raises Unreadable: when it is not JSON (which a real server never sends).
    """
    if raw is None or not raw:
        return None
    try:
        return _decode(raw)
    except (msgspec.DecodeError, RecursionError) as error:
        raise Unreadable(f"not JSON: {error}") from None


def _decoded(
    raw: msgspec.Raw | None, problems: Problems, resource: str, field: str, where: str
) -> Any:
    """:func:`raw_value`, or None when it is not JSON: reported under *field*."""
    try:
        return raw_value(raw)
    except Unreadable as error:
        problems.add(resource, field, f"{where} {field}: {error}")
        return None


def quantity(value: Any) -> float:
    """A Kubernetes quantity given as a string: an amount (capacity, counter), never negative.

    :raises Unreadable: for anything else.
    """
    if not isinstance(value, str):
        raise Unreadable(f"expected a quantity string, got {_short(value)}")
    try:
        amount = parse_quantity(value)
    except QuantityError as error:
        raise Unreadable(str(error)) from None
    if amount < 0:
        raise Unreadable(f"a negative amount: {_short(value)}")
    return amount


class RequestPolicy(msgspec.Struct, frozen=True, gc=False):
    """A capacity's ``requestPolicy``: what a request consumes of it, and what it refuses.

    ``validRange`` (``min``, ``max``, ``step``) or ``validValues`` (ascending, as the API
    requires), and the ``default`` a request naming the capacity not at all consumes.
    """

    default: float | None = None
    ranged: bool = False
    """Whether ``validRange`` is given."""
    min: float | None = None
    max: float | None = None
    step: float | None = None
    values: tuple[float, ...] = ()
    """``validValues``."""
    milli: bool = False
    """Whether the range is worked in thousandths (every bound a whole number of them, the step
    at least one), as the allocator does with ``DRAFractionalCapacityRange`` (on from 1.37): a
    request that is not a whole number of thousandths cannot be rounded then."""

    @property
    def rounds(self) -> bool:
        """Whether it rounds or refuses a request (a ``default`` alone does neither)."""
        return self.ranged or bool(self.values)

    def steps(self, amount: float) -> float | None:
        """How many ``step`` *amount* is from ``min``; None when no float counts them.

        The allocator cannot judge such an amount either: past an int64 its arithmetic wraps.
        None too without a step above zero (which the API requires).
        """
        if self.step is None or self.step <= 0 or self.min is None:
            return None
        steps = (amount - self.min) / self.step
        return steps if math.isfinite(steps) else None


def request_policy(value: Any, capacity: float | None = None) -> RequestPolicy:
    """A capacity's ``requestPolicy`` map; *capacity*, the capacity's value, when known.

    :raises Unreadable: when it is not a map, one of its quantities cannot be read, or no
        request can be judged by it: a step of zero, or, without a ``default``, a capacity
        more steps from ``min`` than a float counts (what a request naming none consumes).
    """
    if not isinstance(value, dict):
        raise Unreadable(f"requestPolicy: expected a map, got {_short(value)}")
    default = value.get("default")
    bounds = value.get("validRange")
    listed = value.get("validValues")
    if bounds is not None and not isinstance(bounds, dict):
        raise Unreadable(f"requestPolicy validRange: expected a map, got {_short(bounds)}")
    if listed is not None and not isinstance(listed, list):
        raise Unreadable(f"requestPolicy validValues: expected a list, got {_short(listed)}")
    if listed is not None and len(listed) > VALID_VALUES:  # each kept as a float, per device
        raise Unreadable(
            f"requestPolicy validValues: {len(listed)} values, more than the API server's "
            f"{VALID_VALUES}"
        )
    try:
        bounds = bounds or {}
        texts = [bounds.get(key) for key in ("min", "max", "step")]
        low, high, step = (None if text is None else quantity(text) for text in texts)
        if step == 0:  # the API refuses it on a new slice; one stored before may have it
            raise Unreadable("validRange step: must be greater than zero")
        read = RequestPolicy(
            None if default is None else quantity(default),
            "validRange" in value and value["validRange"] is not None,
            low,
            high,
            step,
            tuple([quantity(listed_value) for listed_value in listed or ()]),
            all(text is None or _thousandths(text) for text in texts)
            and (step is None or step >= 0.001),
        )
    except Unreadable as error:
        raise Unreadable(f"requestPolicy: {error}") from None
    stepped = step is not None and low is not None and read.default is None
    if capacity is not None and stepped and read.steps(capacity) is None:
        raise Unreadable(
            f"requestPolicy: the capacity {capacity:g} is more steps of {step:g} from min than "
            "can be counted, and no default says what a request naming none consumes"
        )
    return read


def _thousandths(text: str) -> bool:
    """Whether the quantity *text* is a whole number of thousandths that fits an int64."""
    thousandths = parse_quantity_exact(text) * 1000
    return thousandths == thousandths.to_integral_value() and abs(thousandths) < 2**63


def counters(value: Any) -> dict[str, float]:
    """A ``{"<counter>": {"value": "<quantity>"}}`` map.

    :raises Unreadable: when the map or any counter in it cannot be read.
    """
    if not isinstance(value, dict):
        raise Unreadable(f"expected a map of counters, got {_short(value)}")
    found = {}
    for name, counter in value.items():
        if not isinstance(counter, dict):
            raise Unreadable(f"counter {name}: expected {{value: quantity}}, got {_short(counter)}")
        try:
            found[name] = quantity(counter.get("value"))
        except Unreadable as error:
            raise Unreadable(f"counter {name}: {error}") from None
    return found


def _list(
    raw: msgspec.Raw | None, problems: Problems, resource: str, field: str, where: str
) -> list[Any]:
    """A field that is a list: its entries; absent or null gives none, another shape is reported.

    *field* names it in the report as the API does (``taints``, ``status.devices``...).
    """
    value = _decoded(raw, problems, resource, field, where)
    if value is None:
        return []
    if not isinstance(value, list):
        problems.add(resource, field, f"{where} {field}: expected a list, got {_short(value)}")
        return []
    return value


def counter_sets(
    raw: msgspec.Raw | None, name_key: str, problems: Problems, resource: str, where: str
) -> tuple[tuple[str, dict[str, float]], ...]:
    """``sharedCounters`` (*name_key* ``name``) or ``consumesCounters`` (``counterSet``).

    Returns (counter set, counters) pairs; a set that cannot be read is reported and left out.
    """
    field = "sharedCounters" if name_key == "name" else "consumesCounters"
    value = _list(raw, problems, resource, field, where)
    found = []
    for entry in value:
        name = entry.get(name_key) if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            problems.add(resource, field, f"{where} {field}: an entry has no {name_key}")
            continue
        try:
            found.append((name, counters(entry.get("counters") or {})))
        except Unreadable as error:
            problems.add(resource, field, f"{where} {field} {name}: {error}")
    return tuple(found)


def taints(
    raw: msgspec.Raw | None, problems: Problems, resource: str, where: str
) -> list[tuple[str, str, str, float | None]]:
    """A device's taints as (key, value, effect, timeAdded in seconds or None).

    Unknown effects are reported and left out; an unreadable ``timeAdded`` is reported and read
    as None.
    """
    value = _list(raw, problems, resource, "taints", where)
    found = []
    for taint in value:
        if not isinstance(taint, dict) or not isinstance(taint.get("key"), str):
            problems.add(resource, "taints", f"{where} taints: an entry has no key")
            continue
        key, effect = taint["key"], taint.get("effect")
        text = taint.get("value")
        if effect not in TAINT_EFFECTS:
            problems.add(
                resource, "taints", f"{where} taint {key}: unknown effect {_short(effect)}"
            )
            continue
        added = taint.get("timeAdded")
        when = None
        if added is not None:
            try:
                when = timestamp(added if isinstance(added, str) else None)
            except Unreadable as error:
                problems.add(resource, "taints", f"{where} taint {key} timeAdded: {error}")
        found.append((key, text if isinstance(text, str) else "", effect, when))
    return found


def consumed_capacity(
    raw: msgspec.Raw | None, problems: Problems, resource: str, where: str
) -> dict[str, float]:
    """``results[].consumedCapacity``: capacity name -> quantity; bad quantities left out."""
    value = _decoded(raw, problems, resource, "consumedCapacity", where)
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.add(
            resource,
            "consumedCapacity",
            f"{where} consumedCapacity: expected a map, got {_short(value)}",
        )
        return {}
    return _quantities(value, problems, resource, "consumedCapacity", where)


def _quantities(
    value: dict[str, Any], problems: Problems, resource: str, field: str, where: str
) -> dict[str, float]:
    """Each name's quantity in *value*; a bad one is left out and reported under *field*."""
    found = {}
    for name, amount in value.items():
        try:
            found[name] = quantity(amount)
        except Unreadable as error:
            problems.add(resource, field, f"{where} {field} {name}: {error}")
    return found


DeviceConditions = tuple[tuple[str, str, str], tuple[tuple[str, str], ...]]
"""A ``status.devices[]`` entry's (driver, pool, device) and its (type, status lower-cased)
conditions, in the order written."""


def device_conditions(
    entries: list[dict[str, Any]], problems: Problems, resource: str, where: str
) -> list[DeviceConditions]:
    """The conditions of each ``status.devices[]`` entry (see :func:`device_statuses`)."""
    found: list[DeviceConditions] = []
    for entry in entries:
        driver, pool, device = (text(entry.get(k)) for k in ("driver", "pool", "device"))
        conditions = entry.get("conditions") or []
        if not isinstance(conditions, list):
            conditions = [None]
        read = _conditions(
            conditions, problems, resource, "status.devices", f"{where} device {device}"
        )
        found.append(((driver, pool, device), tuple(read)))
    return found


def names(
    raw: msgspec.Raw | None, problems: Problems, resource: str, field: str, where: str, most: int
) -> tuple[str, ...]:
    """A list of names (``bindingConditions``...); an entry that is not a string is reported.

    Past *most* (the API server's bound) the rest are reported and not kept.
    """
    found = []
    entries = _list(raw, problems, resource, field, where)
    if len(entries) > most:
        problems.add(
            resource,
            field,
            f"{where} {field}: {len(entries)} entries, more than the API server's {most}: the "
            f"first {most} read",
        )
        del entries[most:]
    for entry in entries:
        if isinstance(entry, str):
            found.append(entry)
        else:
            problems.add(
                resource, field, f"{where} {field}: an entry is not a name: {_short(entry)}"
            )
    return tuple(found)


def _conditions(
    conditions: list[Any], problems: Problems, resource: str, field: str, where: str
) -> list[tuple[str, str]]:
    """Each condition's (type, status lower-cased); one without both is reported."""
    found = []
    for condition in conditions:
        kind = condition.get("type") if isinstance(condition, dict) else None
        status = condition.get("status") if isinstance(condition, dict) else None
        if not isinstance(kind, str) or status not in CONDITION_STATUSES:
            problems.add(
                resource,
                field,
                f"{where} condition: expected a type and a status of True, False or Unknown, "
                f"got {_short(condition)}",
            )
            continue
        found.append((kind, CONDITION_STATUSES[status]))
    return found


def timestamp(value: str | None) -> float:
    """An RFC 3339 time as Unix seconds.

    :raises Unreadable: when it is not one.
    """
    if not value:
        raise Unreadable("no timestamp")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise Unreadable(f"not an RFC 3339 time: {_short(value)}") from None


def integer(value: Any) -> int | None:
    """An integer field; None when absent or not an integer."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def attribute_text(value: Mapping[str, Any] | None) -> str | None:
    """An attribute's value as label text: strings as they are, others in their JSON spelling."""
    if not isinstance(value, dict) or len(value) != 1:
        return None
    ((kind, inner),) = value.items()
    if kind in ("string", "version") and isinstance(inner, str):
        return inner
    if kind == "bool" and isinstance(inner, bool):
        return "true" if inner else "false"
    if kind == "int" and isinstance(inner, int) and not isinstance(inner, bool):
        return str(inner)
    return None


def text(value: Any) -> str:
    """A string field as it is; "" when absent or not a string."""
    return value if isinstance(value, str) else ""


def scalar_text(value: Any) -> str:
    """A string or number as label text (numbers in their JSON spelling); "" for the others."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return ""
    return msgspec.json.encode(value).decode()


def device_statuses(
    raw: msgspec.Raw | None, problems: Problems, resource: str, where: str
) -> list[dict[str, Any]]:
    """``status.devices[]`` entries that are maps; the others reported."""
    value = _list(raw, problems, resource, "status.devices", where)
    found = []
    for entry in value:
        if isinstance(entry, dict):
            found.append(entry)
        else:
            problems.add(
                resource, "status.devices", f"{where} status.devices: an entry is not a map"
            )
    return found


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


Toleration = tuple[str, str, str, str]
"""(key, operator, value, effect) of a request's toleration; "" where absent."""


TimedToleration = tuple[Toleration, "int | None"]
"""A toleration and its ``tolerationSeconds`` (None: not set, tolerated for ever)."""


def tolerations(
    raw: msgspec.Raw | None, problems: Problems, resource: str, where: str
) -> tuple[Toleration, ...]:
    """A request's ``tolerations``; entries of another shape are reported and left out."""
    found = timed_tolerations(raw, problems, resource, where)
    return tuple([toleration for toleration, _ in found])


def timed_tolerations(
    raw: msgspec.Raw | None, problems: Problems, resource: str, where: str
) -> tuple[TimedToleration, ...]:
    """``tolerations`` with their ``tolerationSeconds``: the eviction controller reads them.

    Seconds that are not an integer are reported and read as 0 (evicted at once), so that an
    unreadable value never hides an eviction.
    """
    value = _list(raw, problems, resource, "tolerations", where)
    found = []
    for entry in value:
        if not isinstance(entry, dict):
            problems.add(resource, "tolerations", f"{where} tolerations: an entry is not a map")
            continue
        key, operator, text, effect, seconds = (
            entry.get(name) for name in ("key", "operator", "value", "effect", "tolerationSeconds")
        )
        if seconds is not None and (not isinstance(seconds, int) or isinstance(seconds, bool)):
            problems.add(
                resource,
                "tolerations",
                f"{where} tolerationSeconds: not an integer: {_short(seconds)}",
            )
            seconds = 0
        found.append(
            (
                (
                    key if isinstance(key, str) else "",
                    operator if isinstance(operator, str) and operator else "Equal",
                    text if isinstance(text, str) else "",
                    effect if isinstance(effect, str) else "",
                ),
                seconds,
            )
        )
    return tuple(found)


def tolerated(tolerations: tuple[Toleration, ...], key: str, value: str, effect: str) -> bool:
    """Whether a toleration matches the taint (``DeviceToleration.ToleratesTaint``).

    An empty key matches every key (the API allows it with ``Exists`` only), an empty effect
    every effect.
    """
    for t_key, operator, t_value, t_effect in tolerations:
        if (t_effect and t_effect != effect) or (t_key and t_key != key):
            continue
        if operator == "Exists" or (operator == "Equal" and t_value == value):
            return True
    return False


def kept(tolerations: tuple[TimedToleration, ...], key: str, value: str, effect: str) -> bool:
    """Whether the holder of a device with this taint keeps it.

    A ``NoExecute`` taint as kube-controller-manager's device-taint eviction controller judges
    it: only a matching toleration of effect ``NoExecute`` exactly and without
    ``tolerationSeconds`` keeps the device for ever (one without an effect, which the allocator
    accepted, does not; one with seconds keeps it until they run out).  Any other effect as the
    allocator matches (:func:`tolerated`).
    """
    if effect == "NoExecute":
        return any(
            seconds is None
            and toleration[3] == "NoExecute"
            and tolerated((toleration,), key, value, effect)
            for toleration, seconds in tolerations
        )
    return tolerated(tuple([toleration for toleration, _ in tolerations]), key, value, effect)


def capacity_requests(
    raw: msgspec.Raw | None, problems: Problems, resource: str, where: str
) -> dict[str, float]:
    """A request's ``capacity.requests``: capacity name -> quantity; bad ones reported."""
    value = _decoded(raw, problems, resource, "capacity", where)
    if not isinstance(value, dict):
        return {}
    requests = value.get("requests")
    if not isinstance(requests, dict):
        return {}
    return _quantities(requests, problems, resource, "capacity", where)


def conditions(
    raw: msgspec.Raw | None, problems: Problems, resource: str, where: str
) -> list[tuple[str, str]]:
    """An object's ``status.conditions[]`` as (type, status lower-cased)."""
    value = _decoded(raw, problems, resource, "status.conditions", where)
    if value is None:
        return []
    listed = value if isinstance(value, list) else [value]
    return _conditions(listed, problems, resource, "status.conditions", where)
