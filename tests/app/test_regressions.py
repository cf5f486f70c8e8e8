"""Named regression tests: every 5xx or misleading answer found by hand (issue 11) or by `make fuzz`.

Each test is one request that once failed; it must now answer below 500 with a message naming the field.
"""

from __future__ import annotations

import csv
import io

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.conftest import make_client


@pytest.fixture(scope="module")
def loose() -> TestClient:
    """A client that turns server errors into 500 answers instead of raising them, as a real server does."""
    return TestClient(create_app(Settings(device="cpu")), raise_server_exceptions=False)


def field_of(response) -> str:
    return response.json()["detail"][0]["loc"][-1]


# 8. A window narrower than the matrix is a non-contiguous NumPy view: orjson refused it (500).
@pytest.mark.parametrize(
    "url", ["/api/v1/attention/window?col=1", "/api/v1/attention/window?col=2&cols=2&rows=3&row=1",
            "/api/v1/block/window?preset=gpt2-small&tokens=a+b+c&cols=5"],
)  # fmt: skip
def test_a_narrow_window_is_served(client: TestClient, url: str) -> None:
    r = client.get(url)
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["values"]) == len(body["rows"]) and all(len(row) == len(body["cols"]) for row in body["values"])


def test_a_narrow_window_holds_the_same_numbers_as_the_trace(client: TestClient) -> None:
    full = client.get("/api/v1/attention?stages=softmax").json()["stages"][0]["tensors"]["weights"][0]
    w = client.get("/api/v1/attention/window?col=1&cols=3&row=2&rows=2").json()["values"]
    assert w == [row[1:4] for row in full[2:4]]


# 9, 10. Unicode digits, underscores and control characters in integer view parameters.
@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/api/v1/attention/heatmap.png?stage=²", "stage"),
        ("/api/v1/attention/window?stage=²", "stage"),
        ("/api/v1/attention/export.npy?stage=²", "stage"),
        ("/api/v1/attention/export.csv?head=٣", "head"),
        ("/api/v1/attention/export.csv?head=1_1", "head"),
        ("/api/v1/attention/export.csv?head=0%0A", "head"),
        ("/api/v1/attention/window?row=²", "row"),
        ("/api/v1/attention/heatmap.png?size=1_024", "size"),
        ("/api/v1/block/heatmap.png?stage=²", "stage"),
    ],
)
def test_integer_view_parameters_take_ascii_digits_only(loose: TestClient, url: str, field: str) -> None:
    r = loose.get(url)
    assert r.status_code == 422, r.text
    assert field_of(r) == field


@pytest.mark.parametrize("url", ["/?stage=²", "/embed?stage=²", "/block?stage=²", "/?cell=weights.0.².0",
                                 "/?head=٣", "/decode?step=²", "/?tile=²,0"])  # fmt: skip
def test_pages_refuse_unicode_digits_inline(loose: TestClient, url: str) -> None:
    r = loose.get(url + "&lang=en")
    assert r.status_code == 422, r.text[:300]
    assert "digits 0-9" in r.text or "unknown stage" in r.text or "tensor.head.row.col" in r.text


def test_the_csv_filename_comes_from_validated_values(client: TestClient) -> None:
    r = client.get("/api/v1/attention/export.csv?stage=4&head=0")
    assert r.status_code == 200
    assert r.headers["content-disposition"] == 'attachment; filename="weights-head0.csv"'


# 11. A cell past the last query row in cross-attention.
def test_a_cell_past_the_last_query_row_is_ignored(client: TestClient) -> None:
    base = "/?tokens=a+b&kv_tokens=x+y+z+w&stage=4&lang=en"
    r = client.get(base + "&cell=weights.0.3.1")
    assert r.status_code == 200
    assert 'id="arithmetic"' not in r.text
    ok = client.get(base + "&cell=weights.0.1.3")
    assert ok.status_code == 200 and 'id="arithmetic"' in ok.text


# 12. A 3,000-character token in presenter mode: the QR code overflowed.
def test_presenter_mode_with_a_long_url_shows_the_address_without_a_qr_code(loose: TestClient) -> None:
    r = loose.get("/?present=1&lang=en&tokens=" + "a" * 3000)
    assert r.status_code == 200, r.text[:300]
    assert "too long for a QR code" in r.text
    short = loose.get("/?present=1&lang=en")
    assert short.status_code == 200 and "<svg" in short.text


# 13. A lone surrogate in a JSON string, on every POST route.
@pytest.mark.parametrize("path", ["/api/v1/attention", "/api/v1/attention.npz", "/api/v1/block", "/api/v1/decode"])
def test_a_lone_surrogate_is_refused(loose: TestClient, path: str) -> None:
    r = loose.post(path, content=b'{"tokens": ["a", "\\ud800"]}', headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert field_of(r) == "tokens"
    assert "surrogate" in r.json()["message"]


# 14. A 500 carries the security headers and a JSON body; a huge query gets a 414 that names it.
def test_an_unexpected_error_is_a_json_500_with_security_headers() -> None:
    app = create_app(Settings(device="cpu"))

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("a bug")

    r = TestClient(app, raise_server_exceptions=False).get("/boom")
    assert r.status_code == 500
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'self'" in r.headers["content-security-policy"]
    assert r.json()["detail"][0]["type"] == "internal"
    assert "a bug" not in r.text


def test_a_query_over_the_limit_is_a_414_naming_the_query(client: TestClient) -> None:
    r = client.get("/api/v1/attention?tokens=" + "a" * 40_000)
    assert r.status_code == 414
    assert r.json()["detail"][0]["loc"] == ["query"]
    assert r.headers["x-content-type-options"] == "nosniff"


# 15. CSV cells that a spreadsheet would run as formulas.
def test_csv_labels_that_look_like_formulas_are_quoted(client: TestClient) -> None:
    r = client.get("/api/v1/attention/export.csv?tokens=%3D1%2B1+%2Bx+%40SUM+-2+ok")
    assert r.status_code == 200
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0][1:] == ["'=1+1", "'+x", "'@SUM", "'-2", "ok"]
    assert [row[0] for row in rows[1:]] == ["'=1+1", "'+x", "'@SUM", "'-2", "ok"]
    weights = client.get("/api/v1/attention?stages=softmax&tokens=%3D1%2B1+%2Bx+%40SUM+-2+ok").json()
    assert [float(v) for v in rows[1][1:]] == weights["stages"][0]["tensors"]["weights"][0][0]  # numbers stay numbers


# 16. The Host header must not poison the cached presenter page.
def test_the_host_header_does_not_poison_the_presenter_page() -> None:
    with make_client(public_url="http://lab.school.example") as c:
        evil = c.get("/?present=1&lang=en", headers={"host": "evil.example"})
        assert evil.status_code == 200 and "evil.example" not in evil.text
        fresh = c.get("/?present=1&lang=en")
        assert "evil.example" not in fresh.text
        assert "http://lab.school.example/?tokens=cat+sat+on+the+mat&amp;lang=en" in fresh.text  # its example named
    with make_client() as c:  # no public URL: each host's page is cached apart
        c.get("/?present=1&lang=en", headers={"host": "evil.example"})
        assert "evil.example" not in c.get("/?present=1&lang=en").text


# 17. Link encoding and clear messages.
def test_demos_language_links_are_url_encoded(client: TestClient) -> None:
    r = client.get("/demos?tokens=a%26b%3Dc+d&perm=1,0&lang=en")
    assert "tokens=a%26b%3Dc+d" in r.text and "tokens=a&b=c" not in r.text


@pytest.mark.parametrize(
    ("body", "content_type", "words"),
    [
        (b'{"tokens": ["a"', "application/json", "not valid JSON"),
        (b"[" * 5000 + b"]" * 5000, "application/json", "nested too deeply"),
        (b'{"seed": ' + b"9" * 5000 + b"}", "application/json", "too many digits"),
        (b'{"seed": 1}', "text/plain", "Content-Type: application/json"),
    ],
)
def test_unreadable_bodies_get_messages_that_say_why(
    client: TestClient, body: bytes, content_type: str, words: str
) -> None:
    r = client.post("/api/v1/attention", content=body, headers={"content-type": content_type})
    assert r.status_code == 422
    assert words in r.json()["message"]
    assert r.json()["detail"][0]["loc"] == ["body"]


@pytest.mark.parametrize(
    ("body", "field"),
    [({"seed": "1"}, "seed"), ({"x": [["1", 0, 0, 0]]}, "x"), ({"d_model": "8"}, "d_model"), ({"seed": True}, "seed")],
)
def test_json_numbers_must_be_numbers(client: TestClient, body: dict, field: str) -> None:
    r = client.post("/api/v1/attention", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][1] == field


def test_get_query_text_still_becomes_numbers(client: TestClient) -> None:
    r = client.get("/api/v1/attention?seed=3&rope_base=500.5&positions=rope&mask=padding&pad_positions=1,2")
    assert r.status_code == 200, r.text
    spec = r.json()["spec"]
    assert spec["seed"] == 3 and spec["pad_positions"] == [1, 2]


def test_decode_refuses_heads_instead_of_ignoring_them(client: TestClient) -> None:
    r = client.post("/api/v1/decode", json={"heads": [99]})
    assert r.status_code == 422
    assert field_of(r) == "heads"


# make fuzz: a single-valued query parameter given twice was silently read as its last value.
def test_a_single_valued_parameter_given_twice_is_refused(client: TestClient) -> None:
    r = client.get("/api/v1/demo/permutation?seed=1&seed=2")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "seed"]
    assert client.get("/api/v1/attention?heads=0&heads=0&stages=softmax").status_code == 200  # lists may repeat
