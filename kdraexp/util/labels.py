"""Label values a row leads with, rendered to text once per object and shared by its families.

A device's five labels or a claim's two are escaped and joined once; every family of the object
writes the same text.  Pure data: the allocator's facts carry these values without knowing the
families that write them.
"""

from __future__ import annotations

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

    Kept out of the cyclic garbage collector (it refers to no container that could refer back):
    a collection holds one per device and claim, and tracked objects make every collector pass
    longer.
    """

    group: LabelGroup
    values: tuple[str, ...]
    text: str
