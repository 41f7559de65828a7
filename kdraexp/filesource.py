"""The offline source: the three kinds read from a file instead of an API server.

The file is what ``kubectl get resourceclaims,resourceslices,deviceclasses -A -o yaml`` writes
(a ``List``), or multi-document YAML, or JSON.  Its status is checked at every scrape and the file
parsed again whenever it changed, so a scrape always reflects the file as it is.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
import yaml

from kdraexp.apiclient import ListError
from kdraexp.dra import KINDS, Kind, ListResult

API_VERSION = "resource.k8s.io/v1"

try:
    _Loader: type[Any] = yaml.CSafeLoader
except AttributeError:  # PyYAML built without libyaml
    _Loader = yaml.SafeLoader


class FileSource:
    """Lists the three kinds from one file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._items: dict[str, list[Any]] = {}

    async def fetch(self, kind: Kind) -> ListResult:
        """Every object of *kind* in the file, reduced to samples.

        :raises ListError: when the file cannot be read or holds something malformed.
        """
        items = self._objects()[kind.kind]
        result = ListResult()
        converted = []
        for index, item in enumerate(items):
            try:
                converted.append(kind.item_decoder.decode(msgspec.json.encode(item)))
            except msgspec.ValidationError as error:
                name = _name_of(item)
                raise self._error(
                    kind, "Decode", f"{kind.kind} {name or f'#{index + 1}'}: {error}"
                ) from None
        kind.reduce(converted, result)
        return result

    def _objects(self) -> dict[str, list[Any]]:
        try:
            status = os.stat(self.path)
            stamp = (status.st_mtime_ns, status.st_size, status.st_ino)
            if stamp == self._stamp:
                return self._items
            with open(self.path, encoding="utf-8") as file:
                text = file.read()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            raise self._error(
                None, "FileUnreadable", f"cannot read {self.path}: {reason}"
            ) from None
        try:
            documents = list(yaml.load_all(text, Loader=_Loader))
        except yaml.YAMLError as error:
            message = " ".join(str(error).split())
            raise self._error(
                None, "Decode", f"{self.path} is not YAML or JSON: {message}"
            ) from None
        self._items = self._sort(documents)
        self._stamp = stamp
        return self._items

    def _sort(self, documents: list[Any]) -> dict[str, list[Any]]:
        wanted = {kind.kind: kind for kind in KINDS}
        items: dict[str, list[Any]] = {name: [] for name in wanted}
        for document in documents:
            if document is None:
                continue
            if not isinstance(document, dict):
                raise self._error(None, "Decode", f"{self.path}: a document is not a mapping")
            members = document.get("items") if "items" in document else [document]
            for item in members or ():
                if not isinstance(item, dict):
                    raise self._error(None, "Decode", f"{self.path}: a list item is not a mapping")
                kind = item.get("kind")
                if kind not in wanted:
                    continue
                if item.get("apiVersion") != API_VERSION:
                    raise self._error(
                        wanted[kind],
                        "Decode",
                        f"{kind} {_name_of(item)}: apiVersion {item.get('apiVersion')!r} "
                        f"is not {API_VERSION}",
                    )
                items[kind].append(item)
        return items

    def _error(self, kind: Kind | None, reason: str, message: str) -> ListError:
        resource = kind.plural if kind else f"file {self.path}"
        return ListError(resource, reason, None, message, public=True)


def _name_of(item: Any) -> str:
    metadata = item.get("metadata") if isinstance(item, dict) else None
    return str(metadata.get("name", "")) if isinstance(metadata, dict) else ""
