"""--auth-filter in memory: the real review client against the fake API, on a clock.

Every route of both listeners but the probes needs a token the fake's TokenReview knows and
its SubjectAccessReview allows; the answers, the cache's times, the bounds (in flight, a
second, header size, entries) and failing closed, each counted in the review the fake records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from treq.testing import RequestTraversalAgent, StubTreq
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from kdraexp.families.selection import select
from kdraexp.kube.credentials import Credentials
from kdraexp.kube.kubeconfig import ClusterConfig
from kdraexp.kube.reviews import ReviewClient
from kdraexp.serve.authfilter import (
    ALLOWED_TTL,
    AUTHENTICATED_TTL,
    DENIED_TTL,
    MAX_AUTHORIZATION,
    OPEN_PATHS,
    REVIEW_TIMEOUT,
    AuthFilter,
)
from kdraexp.serve.web import ExporterApp, TelemetryApp
from kdraexp.sources.gather import Gatherer
from kdraexp.telemetry.authfilter import AuthFilterStats
from kdraexp.telemetry.selfmetrics import CollectionStats, registry
from tests.conftest import in_memory_client, result_of
from tests.fakeapi import FakeKubeAPI, Fault

READER_NAME = "system:serviceaccount:monitoring:prometheus"
STRANGER_NAME = "system:serviceaccount:default:stranger"
READER: dict[str, Any] = {
    "username": READER_NAME,
    "uid": "u-1",
    "groups": ["system:serviceaccounts"],
    "extra": {"scopes": ["a"]},
}
STRANGER: dict[str, Any] = {"username": STRANGER_NAME, "groups": []}


@attrs.define
class Guarded:
    """Both listeners behind one filter, over the fake API, on a clock."""

    fake: FakeKubeAPI
    clock: Clock
    stats: AuthFilterStats
    auth: AuthFilter[Any]
    agent: RequestTraversalAgent
    main: Any
    telemetry: Any

    def get(
        self, path: str, token: str | None = None, *, telemetry: bool = False, **headers: str
    ) -> tuple[int, dict[str, str], bytes]:
        """GET *path* with *token* (if any); what came back, or (0, {}, b"") while pending."""
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        pending = self.asked(path, telemetry=telemetry, **headers)
        return self.answer(pending)

    def asked(self, path: str, *, telemetry: bool = False, **headers: str) -> Any:
        web = self.telemetry if telemetry else self.main
        pending = web.get(f"http://exporter{path}", headers=headers)
        self.settle()
        return pending

    def answer(self, pending: Any) -> tuple[int, dict[str, str], bytes]:
        self.settle()
        box: list[Any] = []

        def seen(result: Any) -> Any:
            box.append(result)
            return result

        pending.addBoth(seen)
        if not box:
            return 0, {}, b""
        response = box[0]
        content = response.content()
        self.settle()
        body = result_of(content)
        names = {k.decode().lower(): v[0].decode() for k, v in response.headers.getAllRawHeaders()}
        return response.code, names, body

    def settle(self) -> None:
        for _ in range(50):
            self.agent.flush()
            self.main.flush()
            self.telemetry.flush()

    def reviews(self, plural: str | None = None) -> int:
        return len([r for r in self.fake.reviews if plural is None or r.plural == plural])


def guarded(
    fake: FakeKubeAPI,
    clock: Clock,
    audiences: tuple[str, ...] = (),
    token_file: str | None = None,
    **bounds: Any,
) -> Guarded:
    client, agent = in_memory_client(fake, clock, token_file=token_file)
    config = ClusterConfig(server="https://api.example:6443", origin="test", token_file=token_file)
    reviews = ReviewClient(agent, config.server, Credentials(config, clock), audiences)
    collection = CollectionStats(10.0)
    app = ExporterApp(Gatherer(client, clock, 10.0, collection, select()), clock, ":8081")
    stats = AuthFilterStats()
    auth = AuthFilter(reviews, clock, stats, **bounds)
    main = StubTreq(auth.protect(app.app.resource(), "main"))
    telemetry = StubTreq(
        auth.protect(TelemetryApp(registry(collection, stats)).app.resource(), "telemetry")
    )
    fake.users = {"reader-token": READER, "stranger-token": STRANGER}
    fake.grants = {(READER_NAME, "get", "/metrics"), (READER_NAME, "get", "/")}
    return Guarded(fake, clock, stats, auth, agent, main, telemetry)


@pytest.fixture
def web(fake: FakeKubeAPI, clock: Clock) -> Guarded:
    return guarded(fake, clock)


def _routes(app: Any) -> list[str]:
    return sorted({rule.rule for rule in app.url_map.iter_rules()})


@pytest.mark.parametrize("telemetry", [False, True], ids=["main", "telemetry"])
def test_every_route_but_the_probes_asks_for_a_token(web: Guarded, telemetry: bool) -> None:
    """Each route Klein has, on both listeners: 401 without a token, 403 not allowed."""
    routes = _routes((TelemetryApp if telemetry else ExporterApp).app)
    assert "/metrics" in routes and "/" in routes and "/healthz" in routes
    web.fake.grants |= {(READER_NAME, "get", route) for route in routes}
    for route in routes:
        code, _, _ = web.get(route, telemetry=telemetry)
        if route.encode() in OPEN_PATHS:
            assert code in (200, 503), route  # /readyz: 503 while the first collection runs
            continue
        assert code == 401, route
        assert web.get(route, "stranger-token", telemetry=telemetry)[0] == 403, route
        assert web.get(route, "reader-token", telemetry=telemetry)[0] == 200, route
    for probe in OPEN_PATHS:
        assert web.get(probe.decode(), telemetry=telemetry)[0] != 401


def test_the_answers(web: Guarded) -> None:
    """No token, another scheme, an unknown token: 401; denied: 403 naming the user."""
    code, headers, body = web.get("/metrics")
    assert (code, headers["www-authenticate"]) == (401, 'Bearer realm="kdraexp"')
    assert body == b"Unauthorized: a bearer token is required\n"
    assert web.get("/metrics", Authorization="Basic dXNlcjpwYXNz")[0] == 401
    assert web.get("/metrics", Authorization="Bearer ")[0] == 401
    assert web.reviews() == 0
    code, _, body = web.get("/metrics", "no-such-token")
    assert (code, body) == (401, b"Unauthorized: the token is not valid\n")
    code, _, body = web.get("/metrics", "stranger-token")
    assert code == 403
    assert body == b"Authorization denied for user system:serviceaccount:default:stranger\n"
    code, _, body = web.get("/metrics", "reader-token")
    assert code == 200 and b"kube_dra_exporter" not in body
    access = [r.spec for r in web.fake.reviews if r.plural == "subjectaccessreviews"][-1]
    assert access == {
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        "user": READER_NAME,
        "uid": "u-1",
        "groups": ["system:serviceaccounts"],
        "extra": {"scopes": ["a"]},
    }
    token = [r.spec for r in web.fake.reviews if r.plural == "tokenreviews"][-1]
    assert token == {"token": "reader-token"}


def test_a_removed_binding_takes_effect_within_the_allowed_ttl(
    fake: FakeKubeAPI, clock: Clock
) -> None:
    """``--auth-allowed-ttl`` shortens how long an allowed answer is kept, nothing else."""
    web = guarded(fake, clock, allowed_ttl=20.0)
    assert web.get("/metrics", "reader-token")[0] == 200
    web.fake.grants.discard((READER_NAME, "get", "/metrics"))
    web.clock.advance(19)
    assert web.get("/metrics", "reader-token")[0] == 200
    web.clock.advance(1)
    assert web.get("/metrics", "reader-token")[0] == 403
    assert (web.reviews("tokenreviews"), web.reviews("subjectaccessreviews")) == (1, 2)


def test_a_huge_authorization_header_is_refused_without_a_review(web: Guarded) -> None:
    code, _, _ = web.get("/metrics", "x" * (MAX_AUTHORIZATION - len("Bearer ") + 1))
    assert code == 401
    assert web.reviews() == 0


def test_results_are_kept_for_controller_runtime_s_times(web: Guarded) -> None:
    """Authentication a minute, allowed five, denied thirty seconds: no review in between."""
    assert web.get("/metrics", "reader-token")[0] == 200
    assert web.get("/metrics", "stranger-token")[0] == 403
    assert (web.reviews("tokenreviews"), web.reviews("subjectaccessreviews")) == (2, 2)
    web.clock.advance(DENIED_TTL - 1)
    web.fake.grants.add((STRANGER_NAME, "get", "/metrics"))
    assert web.get("/metrics", "reader-token")[0] == 200
    assert web.get("/metrics", "stranger-token")[0] == 403  # the denial still holds
    assert web.reviews() == 4
    web.clock.advance(1)
    assert web.get("/metrics", "stranger-token")[0] == 200  # the new grant, within 30 s
    assert web.reviews() == 5
    web.clock.advance(AUTHENTICATED_TTL - DENIED_TTL)
    assert web.get("/metrics", "reader-token")[0] == 200
    assert (web.reviews("tokenreviews"), web.reviews("subjectaccessreviews")) == (3, 3)
    web.fake.grants.discard((READER_NAME, "get", "/metrics"))
    web.clock.advance(ALLOWED_TTL - AUTHENTICATED_TTL - 1)
    assert web.get("/metrics", "reader-token")[0] == 200  # allowed is kept five minutes
    web.clock.advance(1)
    assert web.get("/metrics", "reader-token")[0] == 403
    assert web.get("/metrics", "reader-token")[0] == 403
    assert (web.reviews("tokenreviews"), web.reviews("subjectaccessreviews")) == (4, 4)


@pytest.mark.parametrize(
    ("plural", "code"),
    [
        ("tokenreviews", 500),
        ("tokenreviews", 403),
        ("subjectaccessreviews", 403),
        ("subjectaccessreviews", 200),
    ],
)
def test_a_failed_review_fails_closed(web: Guarded, plural: str, code: int) -> None:
    """An error, the exporter not allowed to create reviews, an answer that is no review: 500.

    Failures are not kept: once the API server answers again, so does the filter.
    """
    web.fake.faults[plural] = Fault(code=code, body=b"<html>" if code == 200 else None)
    answered, _, body = web.get("/metrics", "reader-token")
    assert (answered, body) == (500, b"The review of the request's credentials failed\n")
    del web.fake.faults[plural]
    assert web.get("/metrics", "reader-token")[0] == 200


def test_a_review_not_answered_in_time_is_503(web: Guarded) -> None:
    web.fake.faults["tokenreviews"] = Fault(hang=True)
    pending = web.asked("/metrics", Authorization="Bearer reader-token")
    web.clock.advance(REVIEW_TIMEOUT - 0.1)
    assert web.answer(pending)[0] == 0
    web.clock.advance(0.1)
    code, _, body = web.answer(pending)
    assert (code, body) == (503, b"The API server did not answer the review in time\n")
    assert (
        _sample(
            web, "kube_dra_exporter_auth_filter_reviews_total", kind="tokenreview", result="timeout"
        )
        == 1
    )


def test_one_review_per_token_in_flight(web: Guarded) -> None:
    web.fake.faults["tokenreviews"] = Fault(hang=True)
    pending = [web.asked("/metrics", Authorization="Bearer reader-token") for _ in range(5)]
    assert web.reviews("tokenreviews") == 1
    del web.fake.faults["tokenreviews"]
    answer = {"kind": "TokenReview", "status": {"authenticated": True, "user": READER}}
    web.fake.hanging.pop().callback(json.dumps(answer).encode())
    assert [web.answer(p)[0] for p in pending] == [200] * 5
    assert (web.reviews("tokenreviews"), web.reviews("subjectaccessreviews")) == (1, 1)


def test_a_client_gone_while_judged_is_not_answered(web: Guarded) -> None:
    """Its review runs on, and what it says is kept for the next request of the token."""
    web.fake.faults["tokenreviews"] = Fault(hang=True)
    served: list[object] = []

    class Routes(Resource):
        isLeaf = True  # noqa: N815 - Resource

        def render(self, request: object) -> bytes:
            served.append(request)
            return b"served"

    request = DummyRequest([b"metrics"])
    request.path = b"/metrics"  # type: ignore[attr-defined]  # a Request has one
    request.requestHeaders.setRawHeaders(b"authorization", [b"Bearer reader-token"])
    assert web.auth.protect(Routes(), "main").render(request) is NOT_DONE_YET
    web.settle()
    request.processingFailed(Failure(ConnectionDone()))
    del web.fake.faults["tokenreviews"]
    answer = {"kind": "TokenReview", "status": {"authenticated": True, "user": READER}}
    web.fake.hanging.pop().callback(json.dumps(answer).encode())
    web.settle()
    assert (served, request.written, request.finished) == ([], [], 0)
    assert web.get("/metrics", "reader-token")[0] == 200
    assert web.reviews("tokenreviews") == 1


def test_past_the_reviews_in_flight_a_request_is_answered_503_at_once(
    fake: FakeKubeAPI, clock: Clock
) -> None:
    """Two hang; a third new token is 503 without a review; a cached one is still served."""
    web = guarded(fake, clock, max_in_flight=2)
    assert web.get("/metrics", "reader-token")[0] == 200
    fake.faults["tokenreviews"] = Fault(hang=True)
    hung = [web.asked("/metrics", Authorization=f"Bearer new-{n}") for n in range(2)]
    code, _, body = web.get("/metrics", "new-3")
    assert (code, body) == (503, b"Too many reviews in flight: try again\n")
    assert web.reviews("tokenreviews") == 3
    assert web.get("/metrics", "reader-token")[0] == 200
    clock.advance(REVIEW_TIMEOUT)
    assert [web.answer(p)[0] for p in hung] == [503, 503]
    assert web.get("/metrics", "new-3")[0] == 0  # room again: its review is sent (and hangs)
    assert web.reviews("tokenreviews") == 4
    assert (
        _sample(
            web,
            "kube_dra_exporter_auth_filter_requests_total",
            listener="main",
            outcome="overloaded",
        )
        == 1
    )


def test_past_the_reviews_a_second_a_request_is_answered_503_at_once(
    fake: FakeKubeAPI, clock: Clock
) -> None:
    web = guarded(fake, clock, reviews_per_second=3)
    assert [web.get("/metrics", f"new-{n}")[0] for n in range(4)] == [401, 401, 401, 503]
    assert web.reviews() == 3
    clock.advance(1 / 3)
    assert web.get("/metrics", "new-4")[0] == 401
    assert web.get("/metrics", "new-5")[0] == 503
    assert web.reviews() == 4


def test_the_cache_is_bounded_and_keeps_no_token(fake: FakeKubeAPI, clock: Clock) -> None:
    """Least recently used out first: a token in use stays while new ones come and go."""
    web = guarded(fake, clock, cache_entries=4)
    assert web.get("/metrics", "reader-token")[0] == 200
    for n in range(10):
        assert web.get("/metrics", f"new-{n}")[0] == 401
        assert web.get("/metrics", "reader-token")[0] == 200
    assert _sample(web, "kube_dra_exporter_auth_filter_cache_entries") == 4
    assert (web.reviews("tokenreviews"), web.reviews("subjectaccessreviews")) == (11, 1)
    kept = b"".join(web.auth._cache._entries)
    assert b"reader-token" not in kept and b"new-" not in kept


def test_a_refused_exporter_token_is_read_again(
    fake: FakeKubeAPI, clock: Clock, tmp_path: Path
) -> None:
    """A review refused 401 (the exporter's token rotated) is sent again with the new token."""
    token = tmp_path / "token"
    token.write_text("old")
    web = guarded(fake, clock, token_file=str(token))
    fake.tokens = {"old"}
    assert web.get("/metrics", "reader-token")[0] == 200
    token.write_text("new")
    fake.tokens = {"new"}
    fake.users["other-reader-token"] = READER
    assert web.get("/metrics", "other-reader-token")[0] == 200
    assert [r.plural for r in fake.reviews] == [
        "tokenreviews",
        "subjectaccessreviews",
        "tokenreviews",
        "tokenreviews",
        "subjectaccessreviews",
    ]


def test_audiences(fake: FakeKubeAPI, clock: Clock) -> None:
    """A token meant for none of --auth-token-audiences is not authenticated."""
    web = guarded(fake, clock, audiences=("kdraexp", "metrics"))
    fake.token_audiences["stranger-token"] = ["https://kubernetes.default.svc"]
    fake.grants.add((STRANGER_NAME, "get", "/metrics"))
    assert web.get("/metrics", "reader-token")[0] == 200
    assert web.get("/metrics", "stranger-token")[0] == 401
    asked = {
        r.spec["token"]: r.spec.get("audiences") for r in fake.reviews if r.plural == "tokenreviews"
    }
    assert asked == {
        "reader-token": ["kdraexp", "metrics"],
        "stranger-token": ["kdraexp", "metrics"],
    }


def test_outcomes_and_reviews_counted(web: Guarded) -> None:
    web.get("/metrics", "reader-token")
    web.get("/", "reader-token", telemetry=True)
    web.get("/metrics", "stranger-token")
    web.get("/metrics")
    web.get("/healthz")
    for listener, outcome, count in [
        ("main", "allowed", 1),
        ("telemetry", "allowed", 1),
        ("main", "forbidden", 1),
        ("main", "unauthenticated", 1),
        ("main", "error", 0),
    ]:
        assert (
            _sample(
                web,
                "kube_dra_exporter_auth_filter_requests_total",
                listener=listener,
                outcome=outcome,
            )
            == count
        )
    for kind, result, count in [
        ("tokenreview", "authenticated", 2),
        ("subjectaccessreview", "allowed", 2),
        ("subjectaccessreview", "denied", 1),
        ("tokenreview", "error", 0),
    ]:
        assert (
            _sample(web, "kube_dra_exporter_auth_filter_reviews_total", kind=kind, result=result)
            == count
        )


def _sample(web: Guarded, name: str, **labels: str) -> float:
    """A sample of the filter's own metrics, as the telemetry listener writes them."""
    for family in web.stats.collect():
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    raise AssertionError(f"no {name}{labels}")
