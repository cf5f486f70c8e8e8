"""Property-based fuzzing of every API operation from /openapi.json: no 5xx, and answers that match the schema.

In `make test` the examples are derandomized (the same cases every run, so CI cannot fail by chance); `make fuzz`
runs a long random campaign over the same operations (FUZZ=1, FUZZ_EXAMPLES per operation, 1,000 by default).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

schemathesis = pytest.importorskip("schemathesis")

from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from app.main import create_app  # noqa: E402
from app.settings import Settings  # noqa: E402


def _faster_contains_binary() -> None:
    """The same answer as schemathesis' `contains_binary`, without an isinstance per number of a 1,025 × 1,025
    `mask_matrix` (the coverage phase's over-long negative): a list of plain scalars is skipped in one C-level pass.
    That check ran some 4,700 times while the cases were built and took a minute of each collection. Only the
    modules that still hold the original function are changed; another schemathesis version just runs slower."""
    import importlib

    from schemathesis.transport import serialization

    original = getattr(serialization, "contains_binary", None)
    binary = getattr(serialization, "Binary", None)
    if original is None or binary is None:
        return
    plain = frozenset({int, float, str, bool, type(None)})

    def contains_binary(value: object) -> bool:
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, (binary, bytes)):
                return True
            if isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list) and not plain.issuperset(map(type, item)):
                stack.extend(item)
        return False

    for name in ("schemathesis.specs.openapi.coverage._schema", "schemathesis.specs.openapi.negative",
                 "schemathesis.specs.openapi.checks", "schemathesis.generation.case",
                 "schemathesis.generation.body_overrides", "schemathesis.generation.jsonschema.strategy"):  # fmt: skip
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if getattr(module, "contains_binary", None) is original:
            module.contains_binary = contains_binary  # type: ignore[attr-defined]


_faster_contains_binary()


def _faster_json_bodies() -> None:
    """JSON request bodies encoded by orjson, not by `requests`' json.dumps: the coverage phase's over-long negatives
    (a 1,025 × 1,025 `mask_matrix`, every matrix field) took 0.4 s each to encode in pure json.dumps and some 40 s
    of the run in all; orjson writes the same JSON value in 1/25 of that. A value orjson cannot write as plain JSON
    (an integer past 64 bits, a lone surrogate, NaN or ±inf, which json.dumps refuses too) goes the original way, so
    the app receives what it received before. Only the JSON serializer is replaced; another schemathesis version
    without it just runs slower."""
    import math

    try:
        import orjson
        from schemathesis.transport.asgi import ASGI_TRANSPORT
        from schemathesis.transport.requests import REQUESTS_TRANSPORT, json_serializer
    except ImportError:
        return

    def finite(value: object) -> bool:
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, float):
                if not math.isfinite(item):
                    return False
            elif isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list):
                try:  # a list of numbers in one C-level pass
                    if not all(map(math.isfinite, item)):
                        return False
                except (TypeError, OverflowError):  # not only numbers (or an integer past a float): item by item
                    stack.extend(item)
        return True

    def serializer(ctx, value):
        if isinstance(value, (dict, list)) and finite(value):
            try:
                return {"data": orjson.dumps(value)}
            except (TypeError, orjson.JSONEncodeError):  # a big integer, a lone surrogate, a non-str key
                pass
        return json_serializer(ctx, value)

    for transport in (REQUESTS_TRANSPORT, ASGI_TRANSPORT):
        transport.serializer("application/json", "text/json")(serializer)


_faster_json_bodies()

FUZZ = os.environ.get("FUZZ") == "1"
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "1000")) if FUZZ else 40


@pytest.fixture(scope="module")
def api_schema():
    """The app and its /openapi.json, loaded when the test runs rather than when pytest collects it: building the
    schema and its cases at import took some 40 s of every collection, this module's test or not."""
    # Small limits keep each generated request cheap; the checks are about honesty, not size. The pruning curve is
    # pure compute (~6 s of one core for 5 tokens of SmolLM2, all of it needed for its numbers): at 3 tokens it stays
    # well inside schemathesis' 10 s read timeout on a loaded machine, and longer texts are still fuzzed (a 422).
    # Random room codes would spend the per-address budget for unknown codes at once (then every room operation is
    # a 429): lift it, so the fuzzer reaches the rooms' own validation.
    app = create_app(Settings(device="cpu", max_tokens=48, max_d_model=256, max_heads=16, memory_budget_mb=64,
                              max_predict_tokens=6, max_rank_tokens=2, max_patch_tokens=4, max_prune_tokens=3,
                              room_unknown_codes_per_minute=10**9))  # fmt: skip
    loaded = schemathesis.openapi.from_asgi("/openapi.json", app)
    # A body over the size limit is refused with 413, a query over it with 414: as much a rejection as 422.
    loaded.config.checks.negative_data_rejection.expected_statuses = ["400", "404", "405", "413", "414", "422"]
    return loaded


@pytest.fixture(autouse=True)
def _node_id(request):
    """schemathesis' lazy schema reads and writes `request.node._nodeid` (to name each operation's subtest), an
    attribute pytest 9 no longer has: it gets the node's id to start from."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


# One test item, each operation a subtest of it. A room's event stream never ends by itself: tests/app/rooms/test_rooms.py
# reads it with real streaming clients instead. (The lazy schema's filters replace the loaded one's, so they are
# set here.) Nor is a training run fuzzed: each accepted body would train in a process of its own, and the fourth
# is a 503 by design (tests/app/train/test_api.py checks the bodies and the queue).
schema = schemathesis.pytest.from_fixture("api_schema").exclude(path_regex=r"/events$|^/api/v1/train$")


# One item runs every operation (56), each as long as it was as an item of its own: the suite's 300 s is for one.
@pytest.mark.timeout(1800)
@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=not FUZZ,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=list(HealthCheck),
)
def test_api_never_fails_and_answers_match_the_schema(case):
    response = case.call()
    assert response.status_code < 500, (case.method, case.path, str(case.query)[:300], response.text[:300])
    # Schema-valid requests may still break cross-field rules (d_model divisible by n_heads, …): a 422 for them
    # is the honest answer, so only positive_data_acceptance is left out of the checks.
    case.validate_response(response, excluded_checks=[positive_data_acceptance])
