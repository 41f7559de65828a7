"""The list client against the fake API in memory: paging, restarts, auth retries, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from kdraexp.dra.listing import DEVICE_CLASSES, RESOURCE_CLAIMS, Kind, ListError
from kdraexp.serve.web import failure_line
from kdraexp.util.turns import CHUNK
from tests.collect import Recorder, collect, fetch, labels
from tests.conftest import failure_of, in_memory_client, result_of
from tests.fakeapi import FakeKubeAPI, Fault, status
from tests.objects import claim, device_class


def list_now(
    fake: FakeKubeAPI, clock: Clock, kind: Kind = RESOURCE_CLAIMS, **kw: object
) -> Deferred[Recorder]:
    client, _ = in_memory_client(fake, clock, **kw)  # type: ignore[arg-type]
    return fetch(client, kind)


def add_claims(fake: FakeKubeAPI, count: int) -> None:
    for index in range(count):
        fake.add("resourceclaims", claim(f"c{index}", results=[("d", "p", f"dev{index}")]))


def test_pages_until_continue_is_empty(fake: FakeKubeAPI, clock: Clock) -> None:
    """limit is sent, continue followed, each page's objects handed on CHUNK at a time."""
    add_claims(fake, 7)
    result = result_of(list_now(fake, clock, page_size=3))
    assert result.count == len(result.items) == 7
    assert result.pages == sum(-(-size // CHUNK) for size in (3, 3, 1))
    sent = [r.args for r in fake.lists()]
    assert sent == [
        {"limit": ["3"]},
        {"limit": ["3"], "continue": ["page:3"]},
        {"limit": ["3"], "continue": ["page:6"]},
    ]


def test_short_and_empty_pages(fake: FakeKubeAPI, clock: Clock) -> None:
    """Pages shorter than limit, or empty, with continue set, do not end the list."""
    add_claims(fake, 5)
    fake.page_sizes["resourceclaims"] = [1, 0, 2, 0, 2, 0]
    result = result_of(list_now(fake, clock, page_size=500))
    assert result.count == len(result.items) == 5
    assert len(fake.lists()) == 6


def test_expired_continue_falls_back_to_one_unpaged_list(fake: FakeKubeAPI, clock: Clock) -> None:
    """A 410 Expired mid-list starts over as one unpaged list, as client-go's pager does.

    An unpaged list is always consistent; what the first attempt read is forgotten, so nothing is
    counted twice.
    """
    add_claims(fake, 5)
    fake.expire_continue["resourceclaims"] = 3
    result = result_of(list_now(fake, clock, page_size=2))
    assert result.count == len(result.items) == 5
    assert result.restarts == 1
    assert [r.args for r in fake.lists()] == [
        {"limit": ["2"]},
        {"limit": ["2"], "continue": ["page:2"]},
        {},
    ]


def test_expired_without_continue_fails(fake: FakeKubeAPI, clock: Clock) -> None:
    """A 410 on a list that had no continue token is an error, not a restart."""
    fake.faults["resourceclaims"] = Fault(410, status(410, "Expired", "too old"))
    error = failure_of(list_now(fake, clock, page_size=2)).value
    assert isinstance(error, ListError)
    assert (error.reason, error.code) == ("Expired", 410)
    assert len(fake.lists()) == 1


def test_unauthorized_rereads_token_file(fake: FakeKubeAPI, clock: Clock, tmp_path: object) -> None:
    """A 401 re-reads the token file at once and retries once."""
    from pathlib import Path

    token = Path(str(tmp_path)) / "token"
    token.write_text("old\n")
    fake.tokens = {"old"}
    fake.add("deviceclasses", device_class("gpu", "1"))
    client, _ = in_memory_client(fake, clock, token_file=str(token))
    assert result_of(fetch(client, DEVICE_CLASSES)).count == 1
    token.write_text("new\n")
    fake.tokens = {"new"}
    assert result_of(fetch(client, DEVICE_CLASSES)).count == 1
    assert [r.authorization for r in fake.lists()] == ["Bearer old", "Bearer old", "Bearer new"]


def test_unauthorized_without_new_token_fails(fake: FakeKubeAPI, clock: Clock) -> None:
    """A refused static token is not retried."""
    fake.tokens = {"right"}
    error = failure_of(list_now(fake, clock, token="wrong")).value
    assert isinstance(error, ListError)
    assert (error.reason, error.code) == ("Unauthorized", 401)
    assert len(fake.lists()) == 1


@pytest.mark.parametrize(
    ("fault", "reason", "code"),
    [
        (Fault(403, status(403, "Forbidden", "User cannot list")), "Forbidden", 403),
        (Fault(429, status(429, "TooManyRequests", "slow down")), "TooManyRequests", 429),
        (Fault(500, status(500, "InternalError", "etcd")), "InternalError", 500),
        (Fault(502, b"<html><body>Bad Gateway</body></html>", "text/html"), "BadGateway", 502),
        (Fault(200, b"<!DOCTYPE html><html>login</html>", "text/html"), "Decode", 200),
        (Fault(200, b'{"items": [1, 2', "application/json"), "Decode", 200),
        (Fault(200, b"\x00\xff garbage", "application/octet-stream"), "Decode", 200),
        (Fault(200, {"items": "not a list"}), "Decode", 200),
        (Fault(200, b'{"items": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}"), "Decode", 200),
        (
            Fault(500, b'{"kind": "Status", "details": ' + b"[" * 100_000),
            "InternalServerError",
            500,
        ),
        (Fault(404, status(404, "NotFound", "the server could not find")), "NotFound", 404),
    ],
)
def test_errors_name_resource_code_and_reason(
    fake: FakeKubeAPI, clock: Clock, fault: Fault, reason: str, code: int
) -> None:
    """Status bodies, HTML pages and garbage become ListErrors that say what happened."""
    fake.faults["resourceclaims"] = fault
    error = failure_of(list_now(fake, clock)).value
    assert isinstance(error, ListError)
    assert (error.resource, error.reason, error.code) == ("resourceclaims", reason, code)
    assert failure_line(error) == f"list resourceclaims failed: {code} {reason}"


def test_html_page_is_named(fake: FakeKubeAPI, clock: Clock) -> None:
    """An HTML answer where JSON was expected is called that in the log message."""
    fake.faults["resourceclaims"] = Fault(200, b"<html>proxy login</html>", "text/html")
    error = failure_of(list_now(fake, clock)).value
    assert "HTML page" in str(error)


def test_odd_objects(fake: FakeKubeAPI, clock: Clock) -> None:
    """Null and missing optional fields everywhere, unknown fields ignored."""
    fake.objects["resourceclaims"] = [
        {"metadata": {"name": "a", "namespace": "n"}, "status": None, "future": {"x": 1}},
        {
            "metadata": {"name": "b", "namespace": "n"},
            "status": {"allocation": None, "reservedFor": None},
        },
        {"metadata": {"name": "c", "namespace": "n"}, "status": {"allocation": {"devices": None}}},
        {
            "metadata": {"name": "d", "namespace": "n"},
            "status": {"allocation": {"devices": {"results": None}}},
        },
        {},
    ]
    result = result_of(list_now(fake, clock))
    assert result.count == 5
    collection = collect(claims=fake.objects["resourceclaims"])
    assert len(labels(collection, "kube_resourceclaim_status_reserved_total")) == 5
    assert labels(collection, "kube_resourceclaim_status_allocated_device") == []
    assert len(labels(collection, "kube_resourceclaim_status_state")) == 5


def test_parallel_unauthorized_all_retry(fake: FakeKubeAPI, clock: Clock, tmp_path: Path) -> None:
    """Lists refused together after a rotation all retry with the new token, not just the first."""
    token = tmp_path / "token"
    token.write_text("old")
    fake.tokens = {"new"}
    client, agent = in_memory_client(fake, clock, token_file=str(token))
    fake.hold = True
    lists = [fetch(client, kind) for kind in (DEVICE_CLASSES, RESOURCE_CLAIMS)]
    token.write_text("new")
    fake.release()
    agent.flush()
    assert [result_of(d).count for d in lists] == [0, 0]
    assert [r.authorization for r in fake.lists()] == ["Bearer old"] * 2 + ["Bearer new"] * 2


def test_a_repeated_continue_token_ends_the_list(fake: FakeKubeAPI, clock: Clock) -> None:
    """A server that sends the same continue token again would be followed until the deadline."""
    add_claims(fake, 5)
    fake.repeat_continue["resourceclaims"] = True
    error = failure_of(list_now(fake, clock, page_size=2)).value
    assert isinstance(error, ListError)
    assert error.reason == "Decode"
    assert "sent the continue token 'page:0' twice" in str(error)
    assert len(fake.lists()) == 2
