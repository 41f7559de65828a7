"""What a list is: the kinds listed, where their pages go, and how a list fails.

The API client and the file source both implement :class:`Source`; everything above them sees
only this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any, Protocol

import attrs
import msgspec

from kdraexp.dra import wire
from kdraexp.util.surrogates import Mended
from kdraexp.util.turns import Pages

GROUP = "resource.k8s.io"
DEFAULT_MAX_RESPONSE_BYTES = 64 * 2**20
"""What fits the chart's default memory limit of 192 MiB with the runtime beside it (a third).

A list page of 500 ResourceSlices of 128 devices is about 60 MiB; NVIDIA's slices of 8 GPUs
make pages of a few MiB.  Lower ``--page-size`` for bigger slices."""


@attrs.frozen
class Kind:
    """One listed resource."""

    plural: str
    kind: str
    item_type: type[Any]
    versions: tuple[str, ...] = ("v1",)
    """Versions of its group that serve it, newest first: the newest served is used."""
    group: str = GROUP
    """Its API group; ``""`` for the core group (Pods, at ``/api/v1``)."""
    decoder: msgspec.json.Decoder[Any] = attrs.field(init=False, eq=False, repr=False)
    """Decodes one object of this kind."""

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "decoder", msgspec.json.Decoder(self.item_type))

    def api_versions(self) -> tuple[str, ...]:
        """``apiVersion`` values this kind's objects carry."""
        if not self.group:
            return self.versions
        return tuple(f"{self.group}/{version}" for version in self.versions)

    def path(self, version: str) -> tuple[str, ...]:
        """Where the API server serves its list, cluster-wide: ``apis/<group>/<version>/...``."""
        if not self.group:
            return ("api", version, self.plural)
        return ("apis", self.group, version, self.plural)


DEVICE_CLASSES = Kind("deviceclasses", "DeviceClass", wire.DeviceClass)
DEVICE_TAINT_RULES = Kind(
    "devicetaintrules", "DeviceTaintRule", wire.DeviceTaintRule, versions=("v1", "v1beta2")
)
RESOURCE_SLICES = Kind("resourceslices", "ResourceSlice", wire.ResourceSlice)
RESOURCE_CLAIMS = Kind("resourceclaims", "ResourceClaim", wire.ResourceClaim)
PODS = Kind("pods", "Pod", wire.Pod, group="")
"""Listed only when ``--resources`` names them: the demand no claim shows yet, device health."""
NODES = Kind("nodes", "Node", wire.Node, group="")
"""Listed only when ``--resources`` names them: which nodes selector pools serve, node state."""
LIST_ORDER = (DEVICE_CLASSES, DEVICE_TAINT_RULES, RESOURCE_SLICES, RESOURCE_CLAIMS, PODS, NODES)
"""Every kind, in the order a collection lists them: classes first, since slices need them."""
BY_PLURAL = {kind.plural: kind for kind in LIST_ORDER}
DEFAULT_RESOURCES = ("resourceclaims", "resourceslices", "deviceclasses")


class StatusReason(StrEnum):
    """The reasons a Kubernetes Status may give (``metav1.StatusReason``).

    Any other string a server sends is not trusted as a label value or in the 500 body.
    """

    BAD_REQUEST = "BadRequest"
    CONFLICT = "Conflict"
    EXPIRED = "Expired"
    """A list's continue token or a watch's version is older than the server keeps."""
    FORBIDDEN = "Forbidden"
    GONE = "Gone"
    """As Expired, for a watch (HTTP 410)."""
    INTERNAL_ERROR = "InternalError"
    INVALID = "Invalid"
    METHOD_NOT_ALLOWED = "MethodNotAllowed"
    NOT_ACCEPTABLE = "NotAcceptable"
    NOT_FOUND = "NotFound"
    REQUEST_ENTITY_TOO_LARGE = "RequestEntityTooLarge"
    SERVER_TIMEOUT = "ServerTimeout"
    SERVICE_UNAVAILABLE = "ServiceUnavailable"
    STORE_READ_ERROR = "StoreReadError"
    TIMEOUT = "Timeout"
    TOO_MANY_REQUESTS = "TooManyRequests"
    UNAUTHORIZED = "Unauthorized"
    UNSUPPORTED_MEDIA_TYPE = "UnsupportedMediaType"


class Reason(StrEnum):
    """Why a list failed, when it is not a Kubernetes Status reason (:class:`StatusReason`)."""

    TIMEOUT = "Timeout"
    TRANSPORT = "Transport"
    DECODE = "Decode"
    CREDENTIALS = "Credentials"
    TOO_LARGE = "TooLarge"
    FILE_UNREADABLE = "FileUnreadable"
    INTERNAL = "InternalError"


@attrs.frozen
class ListError(Exception):
    """A list that failed: which resource, the reason (Kubernetes' or ours), the HTTP code."""

    resource: str
    reason: str
    """A Kubernetes Status reason (``Forbidden``, ``Expired``...) or a :class:`Reason`."""
    code: int | None = None
    message: str = ""
    public: bool = False
    """Whether *message* may be shown in the HTTP answer (it never may for API server text)."""
    verb: str = "list"
    """What was refused: ``list``, or ``watch`` (RBAC grants them apart)."""

    def __str__(self) -> str:
        code = f"{self.code} " if self.code is not None else ""
        detail = f": {self.message}" if self.message else ""
        return f"{self.verb} {self.resource}: {code}{self.reason}{detail}"


PAGE = msgspec.json.Decoder(wire.Page)
"""Decodes one page of any list, leaving its objects undecoded."""


class ShapeError(ValueError):
    """An object that is not of its kind's shape (a field of the wrong type); says where."""


class Reader(Pages[msgspec.Raw | Mended], Protocol):
    """Takes the pages of one list as they arrive, so each can be dropped after.

    Handed a response's objects a few at a time, with turns for the reactor between them
    (:func:`kdraexp.util.turns.feed`).
    """

    def page(self, items: Sequence[msgspec.Raw | Mended]) -> None:
        """Read one page of objects, each the undecoded JSON of one object.

        An object whose lone surrogates were read as U+FFFD comes :class:`Mended`: each costs
        a value, counted.

        :raises ShapeError: for an object that is not of the kind's shape.
        """

    def restart(self) -> None:
        """Forget every page read so far: the list starts over."""


class Source(Protocol):
    """Where the DRA objects come from: the API server, or a file."""

    limit: int
    """The most bytes one response may hold (``--max-response-bytes``): what the objects read
    from it may become is bounded by it too (see ``KindReader``)."""

    async def fetch(self, kind: Kind, reader: Reader) -> int:
        """Hand every object of *kind* to *reader*, a page at a time; return how many.

        :raises ListError: when the list cannot be completed.
        """


class Watcher(Source, Protocol):
    """A source that can also follow changes: the API server."""

    list_versions: dict[str, str]
    """Per resource, the ``resourceVersion`` of its last completed list."""

    async def watch(
        self,
        kind: Kind,
        resource_version: str | None,
        handle: Callable[[str, msgspec.Raw | Mended], None],
        *,
        initial: bool,
        timeout_seconds: int,
    ) -> None:
        """Follow *kind*'s changes from *resource_version*, handing each event to *handle*.

        With *initial*, a streaming list: every object as ``ADDED``, then a bookmark annotated
        ``k8s.io/initial-events-end``.

        :raises ListError: when the watch cannot be opened, breaks, or sends an ``ERROR``
            event (its Status as the error: 410 for a compacted version).
        """
