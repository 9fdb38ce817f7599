"""Sub-case reporting for the conformance suite.

Many tests loop over sub-cases (k, orders, tie rules, ...). A sub-case the
backend does not serve (``backend.supports(call)`` gives a reason, or the
case is past an interpreted backend's size budget) is skipped on its own and
the loop goes on. A test whose every sub-case was skipped is reported as
skipped with the reason; a test that checked some sub-cases and skipped
others passes and emits a warning naming the skipped ones.

For an interpreted backend (``interpreted = True``: Triton's interpreter on
CPU), 1 in ``INTERP_SAMPLE`` parametrizations of each larger test matrix is
run (a fixed pseudo-random pick by test id); the others are skipped with that
reason. ``SPARSETOPK_INTERP_SAMPLE=1`` runs them all.
"""

from __future__ import annotations

import warnings
import zlib
from collections import defaultdict

import pytest
from conformance_support import INTERP_SAMPLE, TRACK

# Single tests (no sampling under the interpreter).
_NEVER_SAMPLED = {"test_fuzz_topk", "test_fuzz_composition", "test_fuzz_merge"}


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


def pytest_collection_modifyitems(config, items):
    if INTERP_SAMPLE <= 1:
        return
    groups = defaultdict(list)
    for item in items:
        bk = getattr(item, "callspec", None) and item.callspec.params.get("bk")
        if bk is None or not getattr(bk, "interpreted", False) or item.originalname in _NEVER_SAMPLED:
            continue
        if item.get_closest_marker("skip"):
            continue
        groups[(item.module.__name__, item.originalname, bk.name)].append(item)
    for group in groups.values():
        if len(group) < 4:
            continue
        keep = [it for it in group if zlib.crc32(it.nodeid.encode()) % INTERP_SAMPLE == 0] or group[:1]
        reason = (
            f"interpreted backend: 1 in {INTERP_SAMPLE} parametrizations of this test sampled "
            f"(SPARSETOPK_INTERP_SAMPLE=1 runs all)"
        )
        for it in group:
            if it not in keep:
                it.add_marker(pytest.mark.skip(reason=reason))
