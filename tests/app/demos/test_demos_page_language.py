"""/demos' permutation speaks the page's language (a class-walk finding: the English page shuffled 猫 坐 在 垫子 上): the
English page's tokens are the English example, the Chinese page's the Chinese one (the API's default), and its JSON
link names the tokens it shows."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from tests.conftest import make_client


@pytest.fixture(scope="module")
def client() -> TestClient:
    return make_client()


@pytest.mark.parametrize(("lang", "tokens"), [("en", "cat sat on the mat"), ("zh", "猫 坐 在 垫子 上")])
def test_the_permutation_shows_the_readers_example(client: TestClient, lang: str, tokens: str) -> None:
    page = BeautifulSoup(client.get(f"/demos?lang={lang}").text, "html.parser")
    assert page.select_one("input[name=tokens]")["value"] == tokens
    twin = client.get(f"/demos.json?lang={lang}").json()
    assert twin["permutation"]["tokens"] == tokens.split()
    json_link = page.select_one("link[rel=alternate]")["href"]
    assert client.get(json_link).json()["permutation"]["tokens"] == tokens.split()  # the link gives what is shown


def test_tokens_given_are_kept_in_either_language(client: TestClient) -> None:
    twin = client.get("/demos.json?lang=en&tokens=a+b+c&perm=2,0,1").json()
    assert twin["permutation"]["tokens"] == ["a", "b", "c"]
