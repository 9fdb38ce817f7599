"""Sub-case reporting for the conformance suite.

Many tests loop over sub-cases (k, orders, tie rules, ...). A sub-case the
backend does not serve (``backend.supports(call)`` gives a reason, or the
case is past an interpreted backend's size budget) is skipped on its own and
the loop goes on. A test whose every sub-case was skipped is reported as
skipped with the reason; a test that checked some sub-cases and skipped
others passes and emits a warning naming the skipped ones.
"""

from __future__ import annotations

import warnings

import pytest
from conformance_support import TRACK


class SubcaseSkipWarning(UserWarning):
    """Some sub-cases of a passing test were not served by the backend."""


def _summary(reasons):
    uniq = list(dict.fromkeys(reasons))
    more = f" (+{len(uniq) - 3} more reasons)" if len(uniq) > 3 else ""
    return f"{len(reasons)} sub-case(s) not served: " + "; ".join(uniq[:3]) + more


@pytest.fixture(autouse=True)
def _subcase_tracking():
    TRACK.reset()
    yield
    if TRACK.checks and TRACK.skipped:
        warnings.warn(SubcaseSkipWarning(_summary(TRACK.skipped)), stacklevel=1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if call.when == "call" and rep.passed and TRACK.checks == 0 and TRACK.skipped:
        rep.outcome = "skipped"
        path, lineno, _ = item.reportinfo()
        rep.longrepr = (str(path), (lineno or 0) + 1, "Skipped: " + _summary(TRACK.skipped))
