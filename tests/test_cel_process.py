"""Hostile selectors: evaluated in a process of their own, bounded in CPU and memory, per device.

Without the process, the first selector below ran for seconds on the reactor and the second took
the exporter's memory with it; here each is over budget, matches nothing, counts as a CEL error
and costs one kill, while the other classes of the same request are answered.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from kdraexp.cel import classindex, matching, process
from kdraexp.cel.classindex import MANY_CLASSES, ClassEntry, ClassIndex
from kdraexp.cel.process import EvaluationError, Evaluator
from kdraexp.dra.listing import RESOURCE_SLICES
from kdraexp.families.selection import select
from kdraexp.store.collection import CollectionBuilder, Store
from tests.collect import collect, values
from tests.objects import classy, device, gpu, pool_slice

pytestmark = pytest.mark.skipif(not matching.AVAILABLE, reason="no CEL runtime on this platform")

SLOW = "'a'" + ".replace('a', 'aaaaaaaaaa')" * 8 + ".size() > 0"
"""100 million characters: about 1.5 s of CPU and 100 MB, for each device."""
HUGE = "'a'" + f".replace('a', '{'a' * 4096}')" * 3 + ".size() > 0"
"""68 GB asked for at once, in a few milliseconds."""
FINE = "device.driver == 'gpu.nvidia.com'"
OVER = {process.TIME.reason, process.MEMORY.reason}


@pytest.fixture
def evaluator() -> Iterator[Evaluator]:
    made = Evaluator()
    yield made
    made.close()


@pytest.mark.parametrize("expression", [SLOW, HUGE], ids=["slow", "huge"])
def test_a_selector_over_its_budget_matches_nothing(evaluator: Evaluator, expression: str) -> None:
    """Over budget on the first device, the class is over budget on all: one kill at most.

    Which budget runs out first depends on the engine: Google's builds the slow string for
    seconds, the Rust one's ``replace`` (Python's) reaches the heap cap sooner.
    """
    matcher = matching.Matcher(evaluator)
    written = collect(
        slices=[pool_slice("s", [gpu("a"), gpu("b"), gpu("c")])],
        classes=[classy("hostile", expression), classy("fine", FINE)],
        matcher=matcher,
    )
    matched = values(written, "kube_resourceslice_device_class", "deviceclass_name", "device_name")
    assert set(matched) == {("fine", "a"), ("fine", "b"), ("fine", "c")}
    assert written.class_errors == {"hostile": 3}
    assert written.class_error_messages["hostile"] in OVER
    kills = evaluator.kills
    assert kills <= 1
    again = collect(
        slices=[pool_slice("s", [gpu("a"), gpu("d")])],
        classes=[classy("hostile", expression), classy("fine", FINE)],
        matcher=matcher,
    )
    assert again.class_errors == {"hostile": 2}  # still over budget, and not evaluated again
    assert evaluator.kills == kills


def test_the_items_around_the_one_over_budget_are_answered(evaluator: Evaluator) -> None:
    """The process is killed mid-request; a new one answers what came before and after."""
    device = {"driver": "d", "attributes": {}, "capacity": {}, "allowMultipleAllocations": False}
    answers = evaluator.evaluate(
        ["device.driver == 'd'", SLOW, "device.driver == 'x'"],
        [device],
        [(0, 0), (1, 0), (2, 0), (1, 0), (0, 0)],
    )
    shown = [a if not isinstance(a, process.OverBudget) else "over" for a in answers]
    assert shown == [True, "over", False, "over", True]
    assert evaluator.kills <= 1


def test_a_process_that_cannot_start_is_said(tmp_path: object) -> None:
    """No process to evaluate in: every class the process must evaluate errs with the reason.

    And nothing hangs.  (A class of the simple form is matched all the same: test_cel_native.)
    """
    broken = Evaluator(["/nonexistent/python"])
    written = collect(
        slices=[pool_slice("s", [gpu("a")])],
        classes=[classy("fine", "device.driver.startsWith('gpu.')")],
        matcher=matching.Matcher(broken),
    )
    assert written.class_errors == {"fine": 1}
    assert written.class_error_messages["fine"].startswith(
        "cannot evaluate selectors: cannot start the evaluation process"
    )


def test_classes_times_devices_past_the_budget_leave_classes_unmatched(
    evaluator: Evaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past EVALUATIONS in one collection, the costliest classes go unmatched; the list is read.

    Ten thousand classes over a thousand distinct devices needed ten million evaluations: no
    scrape completed, and then the list failed whole.  Here (a budget of 100, and 8 for each of
    the 10 devices) 20 classes of 10 evaluations each ask for 200: two are left unmatched, each
    with one error saying why, and every other class matches.  The next collection has a budget
    of its own and matches them all, the others' answers kept.
    """
    monkeypatch.setattr(matching, "EVALUATIONS", 100)
    matcher = matching.Matcher(evaluator)
    devices = [gpu(f"g{i}") for i in range(10)]
    classes = [
        classy(
            f"c{i:02d}", f"device.attributes['gpu.nvidia.com'].uuid == 'GPU-g{i % 10}' && {i} >= 0"
        )
        for i in range(20)
    ]
    first = collect(slices=[pool_slice("s", devices)], classes=classes, matcher=matcher)
    assert matcher.evaluations == 180  # refused before it was asked for: no more
    matched = values(first, "kube_resourceslice_device_class", "deviceclass_name")
    assert sorted(name for (name,) in matched) == [f"c{i:02d}" for i in range(18)]
    assert first.class_errors == {"c18": 1, "c19": 1}  # once for the slice read without them
    said = first.class_error_messages["c19"]
    assert said.startswith("not matched: its selectors need more evaluations than were left")
    assert "(10 asked for, among the most of 20 classes)" in said
    assert len(values(first, "kube_resourceslice_device_info", "device_name")) == 10
    again = collect(slices=[pool_slice("s", devices)], classes=classes, matcher=matcher)
    assert matcher.evaluations == 200
    assert len(values(again, "kube_resourceslice_device_class", "deviceclass_name")) == 20
    assert again.class_errors == {}


def test_classes_left_unmatched_are_named_within_a_bound(
    evaluator: Evaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slice read without many classes names UNMATCHED_LISTED of them, and says how many more.

    Its devices count as undecided for every one (neither matched nor not).
    """
    monkeypatch.setattr(matching, "EVALUATIONS", 100)
    monkeypatch.setattr(classindex, "UNMATCHED_LISTED", 1)
    devices = [gpu(f"g{i}") for i in range(10)]
    classes = [
        classy(f"c{i:02d}", f"device.attributes['gpu.nvidia.com'].uuid == 'GPU-g{i}' && {i} >= 0")
        for i in range(20)
    ]
    written = collect(
        slices=[pool_slice("s", devices)], classes=classes, matcher=matching.Matcher(evaluator)
    )
    assert written.class_errors == {"c19": 1}
    assert written.class_error_messages["c19"].endswith(
        "(and 1 more classes left unmatched, not listed)"
    )


def test_a_costly_class_costs_itself_not_the_cheap_ones(
    evaluator: Evaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where evaluations run out, the classes that asked for the most go, not the cheap ones.

    Five classes reading a GPU's type need one evaluation each; three reading its UUID need one
    a GPU.  With 20 evaluations, two UUID classes go and the type classes all match.
    """
    monkeypatch.setattr(matching, "EVALUATIONS", 20)
    monkeypatch.setattr(matching, "PER_DEVICE", 0)
    matcher = matching.Matcher(evaluator)
    devices = [gpu(f"g{i}") for i in range(10)]
    cheap = [
        classy(f"type-{i}", f"device.attributes['gpu.nvidia.com'].type == 'gpu' && {i} >= 0")
        for i in range(5)
    ]
    costly = [
        classy(
            f"uuid-{i}", f"device.attributes['gpu.nvidia.com'].uuid.startsWith('GPU-') && {i} >= 0"
        )
        for i in range(3)
    ]
    written = collect(slices=[pool_slice("s", devices)], classes=cheap + costly, matcher=matcher)
    matched = values(written, "kube_resourceslice_device_class", "deviceclass_name")
    assert {name for (name,) in matched} == {*(f"type-{i}" for i in range(5)), "uuid-0"}
    assert matcher.evaluations == 15
    assert set(written.class_errors) == {"uuid-1", "uuid-2"}


@pytest.mark.parametrize(("form", "evaluations"), [("== '{}'", 0), ("in ['{}']", 320)])
def test_the_caches_are_bounded(
    evaluator: Evaluator, monkeypatch: pytest.MonkeyPatch, form: str, evaluations: int
) -> None:
    """The answers kept, over every expression, never pass ANSWERS (they start over).

    Those the process gave, and those of the simple form given here (no evaluation asked).
    """
    monkeypatch.setattr(matching, "ANSWERS", 50)
    matcher = matching.Matcher(evaluator)
    uuid = "device.attributes['gpu.nvidia.com'].uuid"
    classes = [classy(f"c{i}", f"{uuid} {form.format(f'GPU-g{i}')}") for i in range(8)]
    collect(
        slices=[pool_slice("s", [gpu(f"g{i}") for i in range(40)])],
        classes=classes,
        matcher=matcher,
    )
    assert matcher.evaluations == evaluations
    assert 0 < matcher.kept <= 50


def test_costly_matching_sends_lists_off_the_reactor(evaluator: Evaluator) -> None:
    """Matching that took more than COSTLY at once makes the next list-mode reads threaded.

    A calm collection, which matches nothing, makes them plain again: a thread's hand-offs of
    the interpreter lock cost a calm scrape more than they spare.  Past MANY_CLASSES classes,
    matching is costly from the start; so it is until the classes are compiled.
    """
    square = "[" + ",".join(map(str, range(40))) + "]"
    uuid = "device.attributes['gpu.nvidia.com'].uuid"
    costly = f"{square}.all(a, {square}.all(b, a + b >= 0)) && {uuid} != ''"
    matcher = matching.Matcher(evaluator)
    store = Store()
    slices = [pool_slice("s", [gpu(f"g{i}") for i in range(128)])]  # 0.2-1 ms each, 128 apart
    collect(slices=slices, classes=[classy("costly", costly)], matcher=matcher, store=store)
    assert matcher.costly
    classes = ClassIndex([ClassEntry("costly", (costly,), None)], matcher)
    builder = CollectionBuilder(select(), matcher, store)
    listed, live = builder.reader(RESOURCE_SLICES), builder.reader(RESOURCE_SLICES, live=True)
    for reader in (listed, live):
        reader.reconfigure(classes, ())
    assert listed.off_reactor
    assert not live.off_reactor  # a watch's events come while it would read
    collect(slices=slices, classes=[classy("costly", costly)], matcher=matcher, store=store)
    assert not matcher.costly  # every slice was unchanged: nothing was matched
    many = ClassIndex(
        [ClassEntry(f"c{i}", (FINE,), None) for i in range(MANY_CLASSES + 1)], matcher
    )
    assert many.costly
    fine = ClassIndex([ClassEntry("c", (FINE,), None)], matcher)
    assert fine.costly  # not compiled yet: compiling reads every expression
    matcher.compile((FINE,))
    assert not fine.costly and not ClassIndex([ClassEntry("c", (FINE,), None)], matcher).costly


def test_a_class_only_the_process_answers_is_read_off_the_reactor_at_once(
    evaluator: Evaluator,
) -> None:
    """Before any match is measured: one evaluation may take its whole CPU budget.

    And before the classes are compiled, whatever their selectors: compiling asks the process.
    """
    uuid = "device.attributes['gpu.nvidia.com'].uuid"
    matcher = matching.Matcher(evaluator)
    classes = ClassIndex(
        [ClassEntry("fine", (FINE,), None), ClassEntry("other", (f"{uuid}.size() > 0",), None)],
        matcher,
    )
    reader = CollectionBuilder(select(), matcher, Store()).reader(RESOURCE_SLICES)
    reader.reconfigure(classes, ())
    assert not matcher.costly
    assert classes.costly and reader.off_reactor
    assert matcher.compile_all([(FINE,), (f"{uuid}.size() > 0",)])[1].error is None
    assert classes.costly and reader.off_reactor  # compiled: still the process's to answer


def test_an_int_beyond_int64_reads_as_absent(evaluator: Evaluator) -> None:
    """Kubernetes' ints are int64; a larger one is not a value (nor a crash of the match)."""
    odd = device("x", attributes={"big": {"int": 2**70}, "small": {"int": 7}})
    written = collect(
        slices=[pool_slice("s", [odd])],
        classes=[classy("c", "!has(device.attributes['gpu.nvidia.com'].big)")],
        matcher=matching.Matcher(evaluator),
    )
    assert written.class_errors == {}
    assert values(written, "kube_resourceslice_device_class", "device_name") == {("x",): 1}


def test_comprehensions_past_ten_thousand_iterations_are_evaluated(evaluator: Evaluator) -> None:
    """Kubernetes bounds a selector by its cost, not by Google's 10,000 iterations.

    40,000 iterations cost about 160,000 of Kubernetes' million; the allocator evaluates them.
    """
    numbers = "[" + ",".join(str(n) for n in range(200)) + "]"
    nested = f"{numbers}.all(x, {numbers}.all(y, x + y >= 0))"
    none = f"{numbers}.exists(x, {numbers}.exists(y, x + y > 400))"
    device = {"driver": "d", "attributes": {}, "capacity": {}, "allowMultipleAllocations": False}
    assert evaluator.evaluate([nested, none], [device], [(0, 0), (1, 0)]) == [True, False]


def test_no_process_while_no_family_written_reads_the_matches(evaluator: Evaluator) -> None:
    """With none of the families that read the matches written, no selector is evaluated.

    The classes are still listed and priced: the cost families read them by name.  Before, the
    process started with the first collection and held 23-27 MiB for answers nobody read.
    """
    slices = [pool_slice("s", [gpu("a"), gpu("b")])]
    classes = [classy("gpu", "device.driver.startsWith('gpu.')", cost="2.5")]  # the process's
    priced = select(allowlist="kube_deviceclass_hourly_cost|kube_resourceslice_info")
    assert not priced.evaluates_selectors
    matcher = matching.Matcher(evaluator)
    written = collect(slices=slices, classes=classes, selection=priced, matcher=matcher)
    assert values(written, "kube_deviceclass_hourly_cost", "deviceclass_name") == {("gpu",): 2.5}
    assert matcher.evaluations == 0 and evaluator._process is None
    matched = collect(slices=slices, classes=classes, matcher=matcher)  # read: evaluated
    assert len(values(matched, "kube_resourceslice_device_class", "device_name")) == 2
    assert matcher.evaluations > 0 and evaluator._process is not None


SQUARE = "[" + ",".join(map(str, range(40))) + "]"
STEADY = f"{SQUARE}.all(a, {SQUARE}.all(b, a + b >= 0)) && device.driver == 'd'"
"""0.2-2 ms of CPU for each device: well within its budget, long enough to be killed amid."""
PLAIN = {"driver": "d", "attributes": {}, "capacity": {}, "allowMultipleAllocations": False}


def test_a_kill_from_outside_is_retried_not_charged(evaluator: Evaluator) -> None:
    """SIGKILL from outside (the OOM killer, an operator), idle and amid a request: retried.

    Before, the item being evaluated (or the first of the next request) was over budget for
    good, as if it had needed more memory than the process may hold: 280 of a class's 1,000
    devices matched, then none.  The heap cap makes an allocation fail, never a SIGKILL: one
    the exporter did not send is not the item's doing, and a new process answers it.
    """
    assert evaluator.compile([STEADY]) == [None]
    idle = evaluator._process
    assert idle is not None
    os.kill(idle.pid, signal.SIGKILL)
    idle.wait(10)
    assert evaluator.compile([STEADY, "device.driver == 'x'"]) == [None, None]
    busy = evaluator._process
    assert busy is not None and busy is not idle
    killed: list[int] = []

    def kill_amid() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and busy.poll() is None:
            at = evaluator._current()
            if 100 <= at < 1000:  # the request's 101st item at least, not its reading
                os.kill(busy.pid, signal.SIGKILL)
                killed.append(at)
                return

    watcher = threading.Thread(target=kill_amid)
    watcher.start()
    answers = evaluator.evaluate([STEADY, "device.driver == 'x'"], [PLAIN], [(0, 0)] * 1000)
    watcher.join()
    assert killed, "the request was answered before the kill"
    assert answers == [True] * 1000
    assert evaluator.kills == 0
    assert evaluator.ended_outside == 2


SELF_KILLING = """
import os, signal, struct, sys
sys.stdout.buffer.write(struct.pack(">I", 6) + bytes([0xA5]) + b"ready")
sys.stdout.flush()
sys.stdin.buffer.read(4)
os.kill(os.getpid(), signal.SIGKILL)
"""
"""A process that says it is ready, and is killed as soon as a request comes."""


def test_kills_from_outside_without_end_fail_the_request_not_the_class() -> None:
    """Killed from outside again and again: the request fails, to be asked again next time.

    Nothing is charged to a class: it counts a CEL error that collection, and is evaluated
    again in the next one.
    """
    evaluator = Evaluator([sys.executable, "-c", SELF_KILLING])
    try:
        with pytest.raises(EvaluationError, match="ended from outside 3 times in one request"):
            evaluator.evaluate([STEADY], [PLAIN], [(0, 0)])
        matcher = matching.Matcher(evaluator)
        written = collect(
            slices=[pool_slice("s", [gpu("a")])],
            classes=[classy("c", "device.driver.startsWith('gpu.')")],
            matcher=matcher,
        )
        assert written.class_errors == {"c": 1}
        said = written.class_error_messages["c"]
        assert said.startswith("cannot evaluate selectors: the evaluation process was ended"), said
        assert matching.transient(said) and not matcher._over
        assert evaluator.kills == 0
    finally:
        evaluator.close()


@pytest.mark.parametrize("shared", [False, True], ids=["distinct", "shared"])
def test_classes_that_need_no_evaluation_are_never_left_out(
    evaluator: Evaluator, shared: bool
) -> None:
    """3,000 classes of the simple form over 128 distinct devices: every class has its rows.

    The classes a slice's distinct devices could be matched with, were nothing cached, are
    (262,144 + 8 x 128 + 65,536) / 128 = 2,568; the rest were left unmatched before matching,
    the last by name, although none of them asks the process for anything: 432 classes lost
    their rows.  Where classes share their selectors, every class sharing one with a class
    left out read that class's answer, and all 3,000 lost them.
    """
    uuid, other = "device.attributes['gpu.nvidia.com'].uuid", " && device.driver != 'd{}'"
    classes = [
        classy(f"c{i:04d}", f"{uuid} == 'GPU-g{i % 128}'" + ("" if shared else other.format(i)))
        for i in range(3000)
    ]
    matcher = matching.Matcher(evaluator)
    written = collect(
        slices=[pool_slice("s", [gpu(f"g{i}") for i in range(128)])],
        classes=classes,
        matcher=matcher,
    )
    matched = values(written, "kube_resourceslice_device_class", "deviceclass_name", "device_name")
    assert len(matched) == 3000
    assert {name for name, _ in matched} == {f"c{i:04d}" for i in range(3000)}
    assert written.class_errors == {}
    assert matcher.evaluations == 0 and evaluator._process is None


def test_classes_sharing_selectors_are_left_out_together(
    evaluator: Evaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Classes with the same selectors ask for the same evaluations: they go, or stay, together.

    Twenty classes, ten on each of two selectors over ten distinct devices, with 15
    evaluations: one selector's ten classes are left unmatched, each said, and the other's ten
    match every device.  Each class used to be known by the one with its selectors listed
    last: leaving that one out gave its nine siblings its answer, unsaid, and none matched.
    """
    monkeypatch.setattr(matching, "EVALUATIONS", 15)
    monkeypatch.setattr(matching, "PER_DEVICE", 0)
    uuid = "device.attributes['gpu.nvidia.com'].uuid"
    classes = [classy(f"c{i:02d}", f"{uuid}.startsWith('GPU-') && {i % 2} >= 0") for i in range(20)]
    written = collect(
        slices=[pool_slice("s", [gpu(f"g{i}") for i in range(10)])],
        classes=classes,
        matcher=matching.Matcher(evaluator),
    )
    matched = values(written, "kube_resourceslice_device_class", "deviceclass_name", "device_name")
    even, odd = [f"c{i:02d}" for i in range(0, 20, 2)], [f"c{i:02d}" for i in range(1, 20, 2)]
    assert {name for name, _ in matched} == set(even) and len(matched) == 100
    assert written.class_errors == dict.fromkeys(odd, 1)


def test_many_refused_expressions_are_compiled_in_frames_that_fit(
    evaluator: Evaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refusals come back BATCH expressions a frame at most: never a frame too large to read.

    All the expressions of a request were answered in one frame, refusals of up to 200
    characters each: 84,000 distinct refused selectors passed MAX_FRAME, and every class then
    read "the evaluation process sent a frame too large".  (Here: 3 a frame of 700 bytes.)
    """
    monkeypatch.setattr(process, "MAX_FRAME", 700)
    monkeypatch.setattr(process, "BATCH", 3)
    refused = [f"device.driver == '{'x' * 100}{i}' &&& true" for i in range(8)]
    answers = evaluator.compile([*refused, "device.driver == 'x'"])
    assert answers[-1] is None
    assert all(isinstance(one, str) and "Syntax error" in one for one in answers[:-1])
