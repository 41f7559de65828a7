"""Label values a row leads with, rendered to text once per object and shared by its families.

A device's five labels or a claim's two are escaped and joined once; every family of the object
writes the same text.  Pure data: the allocator's facts carry these values without knowing the
families that write them.
"""

from __future__ import annotations

import collections
import re

import attrs
import msgspec


class LabelArityError(ValueError):
    """A row with a wrong number (or kind) of label values: a bug in a family's rows."""


def escape_label_value(value: str) -> str:
    """Escape a label value as the text and OpenMetrics formats require."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


@attrs.frozen(eq=False)
class LabelGroup:
    """Labels that many families lead with, rendered once per object."""

    names: tuple[str, ...]
    _template: str = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_template", ",".join(f'{name}="%s"' for name in self.names))

    def values(self, *values: str) -> GroupValues:
        """The group's values, in the order of :attr:`names`."""
        if len(values) != len(self.names):
            raise LabelArityError(
                f"{len(values)} values for the {len(self.names)} labels {', '.join(self.names)}"
            )
        text = self._template % tuple([escape_label_value(value) for value in values])
        return GroupValues(self, values, text)


class GroupValues(msgspec.Struct, frozen=True, gc=False):
    """Values of a :class:`LabelGroup` and their ``a="x",b="y"`` text.

    Out of the cyclic garbage collector, as the allocator's facts that hold it (it refers to no
    container that could refer back).
    """

    group: LabelGroup
    values: tuple[str, ...]
    text: str

    def value(self, name: str) -> str:
        """The value of the group's label *name* (in whatever order the group names it)."""
        return self.values[self.group.names.index(name)]


@attrs.frozen
class KeyedLabels:
    """Labels each object names itself, after a row's other labels: ``<prefix>_<key>``.

    kube-state-metrics writes an object's labels and annotations this way (``label_team``,
    ``annotation_owner``): which keys, and so which label names, differ from object to object.
    """

    prefix: str
    """``label`` or ``annotation``."""

    @property
    def shown(self) -> str:
        """How the labels are named where a family's labels are listed: ``label_<key>``."""
        return f"{self.prefix}_<key>"

    def values(self, picked: dict[str, str]) -> KeyedValues:
        """The labels of *picked* keys and values, named and ordered as kube-state-metrics does."""
        keys = sorted(picked)
        names = kube_label_names(self.prefix, keys)
        values = tuple([picked[key] for key in keys])
        text = "".join(
            [
                f',{name}="{escape_label_value(value)}"'
                for name, value in zip(names, values, strict=True)
            ]
        )
        return KeyedValues(names, values, text)


class KeyedValues(msgspec.Struct, frozen=True, gc=False):
    """The names, values and text of one object's :class:`KeyedLabels`.

    The text is ``,name="value"`` for each: written after the row's other labels, it is empty
    when the object has none of the keys asked for.
    """

    names: tuple[str, ...]
    values: tuple[str, ...]
    text: str


_INVALID_NAME_CHARACTER = re.compile(r"[^a-zA-Z0-9_]")
_CAPITAL_AFTER = re.compile(r"([a-z0-9])([A-Z])")


def kube_label_name(prefix: str, key: str) -> str:
    """``<prefix>_<key>`` as kube-state-metrics spells it.

    Any character but ``[a-zA-Z0-9_]`` an underscore, then snake case: ``cost-center`` and
    ``costCenter`` are both ``label_cost_center``.
    """
    snake = _CAPITAL_AFTER.sub(r"\1_\2", _INVALID_NAME_CHARACTER.sub("_", key))
    return f"{prefix}_{snake.lower()}"


def kube_label_names(prefix: str, keys: list[str]) -> tuple[str, ...]:
    """The label names of sorted *keys*, those that collide made apart as kube-state-metrics does.

    Keys whose names collide (``team.name``, ``team/name``, ``team_name``) all take
    ``_conflict<N>``, numbered in the keys' order from 1, the first key's name included
    (kube-state-metrics' ``mapToPrometheusLabels``).  Where it would then write a name twice
    (a key spelt as another's numbered name, ``team_name_conflict1``, which Prometheus refuses
    in one series), a number whose name is some key's own is passed over.
    """
    bases = [kube_label_name(prefix, key) for key in keys]
    colliding = {base for base, count in collections.Counter(bases).items() if count > 1}
    taken = set(bases)
    numbers: dict[str, int] = {}
    """Per name that collides, the last suffix number handed out."""
    names = []
    for base in bases:
        if base not in colliding:
            names.append(base)
            continue
        number = numbers.get(base, 0) + 1
        while f"{base}_conflict{number}" in taken:
            number += 1
        numbers[base] = number
        names.append(f"{base}_conflict{number}")
    return tuple(names)
