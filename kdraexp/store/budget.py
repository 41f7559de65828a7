"""What one collection may evaluate of selectors, begun again by the builder's budget alone.

Two budgets, each begun again for a collection: DeviceClass selectors' evaluations, which the
matcher counts (:mod:`kdraexp.cel.matching`; in watch mode an object read with the classes is
a collection of its own: events come one at a time, never as a list), and the devices claims'
own selectors are evaluated on, which their answers count (:class:`SelectorAnswers`, kept with
the cross-object rows because what they keep is of the store's slices).
"""

from __future__ import annotations

from kdraexp.allocator import SelectorAnswers
from kdraexp.cel.classindex import ClassIndex
from kdraexp.cel.matching import Matcher


class MatcherBudget:
    """The builder's: every begin of a collection's evaluations goes through it."""

    def __init__(self, matcher: Matcher) -> None:
        self._matcher = matcher
        matcher.new_collection()

    def collected(self) -> None:
        """A collection's lists are read: the next one's evaluations begin.

        Whether its matching was costly decides whether the next lists are read off the reactor.
        """
        self._matcher.collected()
        self._matcher.new_collection()

    def event(self, classes: ClassIndex) -> None:
        """An object of a watch, read with *classes*: a collection of its own."""
        if classes.matcher is not None:
            classes.matcher.new_collection()

    def own_selectors(
        self,
        answers: SelectorAnswers | None,
        classes: ClassIndex,
        pending: dict[tuple[str, tuple[str, ...]], int],
    ) -> SelectorAnswers:
        """*answers* begun for a collection of *pending* requests (made anew for a new matcher).

        *pending* gives, per (class, own selectors), the devices of the class.
        """
        if answers is None or answers.matcher is not classes.matcher:
            answers = SelectorAnswers(classes.matcher)
        answers.new_collection(pending)
        return answers
