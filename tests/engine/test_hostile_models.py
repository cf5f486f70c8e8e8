"""Careless or hostile model folders (#36): tiny random models saved with transformers, then tampered with. Each is
refused at start-up with one line naming the file and the field (and `serve` exits 2, with --workers too), or it is
served with the fault dropped and said, and then every request on it answers: no traceback, no hang, no unbounded
memory, no 5xx, no read outside the folder, no SIGBUS when the file is rewritten under the server."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from engine.models import ModelError, load, registry
from engine.predict import perplexity
from tests.conftest import make_client
from tests.own_models import build, write_gguf
from tests.servers import ROOT, free_port

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile")
    out = {arch: build(arch, root / f"tiny-{arch}", seed=i)[0] for i, arch in enumerate(("gpt2", "llama"))}
    out["sharded"] = build("qwen2", root / "tiny-sharded", seed=3, max_shard_size="20KB")[0]
    path, model = build("llama", root / "for-gguf", seed=4)
    out["gguf"] = write_gguf(path, model, root / "tiny.gguf")
    return out


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit_config(d: Path, **changes: Any) -> None:
    c = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(c | changes))


def refused(path: Path, *words: str) -> str:
    """The one-line ModelError naming `words` (the file, the field)."""
    with pytest.raises(ModelError) as err:
        load(path)
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message
    return message


# -- item 2: dimensions and nesting bounded before anything is allocated -----------------------------------------


@pytest.mark.parametrize("layers", [100_000_000, 10**12])
def test_a_huge_layer_count_is_refused_before_a_tensor_name_is_listed(tiny, tmp_path: Path, layers: int) -> None:
    d = copy(tiny["gpt2"], tmp_path / "m")
    edit_config(d, n_layer=layers)
    refused(d, "config.json", "n_layer", f"{layers:,}", "limit of 1,024")


@pytest.mark.parametrize("field", ["n_embd", "n_head", "vocab_size", "n_positions", "n_inner"])
def test_every_dimension_is_capped(tiny, tmp_path: Path, field: str) -> None:
    d = copy(tiny["gpt2"], tmp_path / "m")
    edit_config(d, **{field: 2**40})
    refused(d, "config.json", field, "limit")


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", "1e400", "3.5", '"12"', "true"])
def test_a_dimension_that_is_not_a_finite_integer(tiny, tmp_path: Path, value: str) -> None:
    d = copy(tiny["llama"], tmp_path / "m")
    text = (d / "config.json").read_text()
    (d / "config.json").write_text(text.replace('"num_hidden_layers": 3', f'"num_hidden_layers": {value}'))
    refused(d, "config.json", "num_hidden_layers", "integer")


def test_a_config_nested_200k_deep(tiny, tmp_path: Path) -> None:
    d = copy(tiny["gpt2"], tmp_path / "m")
    text = (d / "config.json").read_text()
    (d / "config.json").write_text(text[:-2] + ', "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    refused(d, "config.json", "nested deeper than 64")


def test_config_json_may_not_be_a_device_a_fifo_or_a_link_out(tiny, tmp_path: Path) -> None:
    d = copy(tiny["gpt2"], tmp_path / "m")
    (d / "config.json").unlink()
    (d / "config.json").symlink_to("/dev/zero")
    refused(d, "config.json", "outside the model folder")
    (d / "config.json").unlink()
    os.mkfifo(d / "config.json")  # opened without blocking: refused at once, never a hang
    refused(d, "config.json", "not a regular file")
    (d / "config.json").unlink()
    os.mkfifo(d / "fifo")
    (d / "config.json").symlink_to("fifo")  # a link inside the folder is followed, and still checked
    refused(d, "config.json", "not a regular file")


def test_a_config_over_its_size_limit(tiny, tmp_path: Path) -> None:
    d = copy(tiny["gpt2"], tmp_path / "m")
    with (d / "config.json").open("r+") as f:
        f.seek(17 * 2**20)
        f.write(" ")
    refused(d, "config.json", "bytes")


# -- item 3: special tokens and the tokenizer inside the vocabulary ---------------------------------------------


def test_special_tokens_outside_the_vocabulary_are_dropped_with_a_warning(tiny, tmp_path: Path) -> None:
    d = copy(tiny["gpt2"], tmp_path / "m")
    edit_config(d, bos_token_id=50256, eos_token_id=[50256, -1, 0])  # GPT2Config(vocab_size=300)'s defaults
    model = load(d)
    assert model.bos_id is None and model.eos_ids == (0,)
    assert len(model.warnings) == 3 and all("config.json" in w for w in model.warnings), model.warnings
    assert any("bos_token_id: 50256" in w for w in model.warnings)
    assert any("eos_token_id: -1" in w for w in model.warnings)


def test_a_tokenizer_with_more_ids_than_the_embedding(tiny, tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    d = copy(tiny["gpt2"], tmp_path / "m")
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    tok.add_tokens([f"extra{i}" for i in range(30)])  # ids 300 to 329, for a 300-row embedding
    tok.save(str(d / "tokenizer.json"))
    refused(d, "tokenizer.json", "329", "300 rows")


@pytest.mark.parametrize("content", [b"\x00\xff garbage", b'{"version": "1.0"}', b"[1, 2, 3]", b"null"])
def test_a_broken_tokenizer_json(tiny, tmp_path: Path, content: bytes) -> None:
    d = copy(tiny["gpt2"], tmp_path / "m")
    (d / "tokenizer.json").write_bytes(content)
    refused(d, "tokenizer.json")


def test_a_tokenizer_linked_outside_the_folder(tiny, tmp_path: Path) -> None:
    d = copy(tiny["gpt2"], tmp_path / "m")
    (d / "tokenizer.json").unlink()
    (d / "tokenizer.json").symlink_to("/etc/passwd")
    refused(d, "tokenizer.json", "outside the model folder")


# -- safetensors headers ----------------------------------------------------------------------------------------


def rewrite_header(file: Path, edit: Any) -> None:
    data = file.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    text = edit(header)
    raw = text if isinstance(text, bytes) else json.dumps(text).encode()
    file.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n :])


def test_shifted_data_offsets(tiny, tmp_path: Path) -> None:
    d = copy(tiny["gpt2"], tmp_path / "m")

    def shift(h: dict[str, Any]) -> dict[str, Any]:
        name = next(k for k in h if k != "__metadata__")
        a, b = h[name]["data_offsets"]
        h[name]["data_offsets"] = [a + 4, b + 4]
        return h

    rewrite_header(d / "model.safetensors", shift)
    refused(d, "model.safetensors", "data_offsets")


@pytest.mark.parametrize(
    ("header", "words"),
    [
        (b"[1, 2, 3]", ("must be a JSON object",)),
        (b"[" * 100_000 + b"]" * 100_000, ("nested deeper than 64",)),
        (b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0.0, 8.5]}}', ("w", "data_offsets")),
        (b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": ["0", "8"]}}', ("w", "data_offsets")),
        (b'{"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}', ("w", "shape")),
        (b'{"w": {"dtype": "F32", "shape": [Infinity], "data_offsets": [0, 8]}}', ("w", "shape")),
        (b'{"w": [1]}', ("w", "malformed")),
        (b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}', ("w", "backwards")),
    ],
)
def test_a_malformed_safetensors_header(tiny, tmp_path: Path, header: bytes, words: tuple[str, ...]) -> None:
    d = copy(tiny["gpt2"], tmp_path / "m")
    rewrite_header(d / "model.safetensors", lambda h: header)
    refused(d, "model.safetensors", *words)


def test_a_shard_index_naming_files_outside_the_folder(tiny, tmp_path: Path) -> None:
    d = copy(tiny["sharded"], tmp_path / "m")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    outside = copy(tiny["gpt2"], tmp_path / "other")
    for target in ("/etc/passwd", "../other/model.safetensors", str(outside / "model.safetensors")):
        wm = dict(index["weight_map"]) | {first: target}
        (d / "model.safetensors.index.json").write_text(json.dumps(index | {"weight_map": wm}))
        message = refused(d, "model.safetensors.index.json")
        assert "outside" in message or "not a file name" in message, message
        assert "bytes" not in message  # nothing is read from it: its size never leaks
    (d / "model.safetensors.index.json").write_text('{"weight_map": [1]}')
    refused(d, "model.safetensors.index.json", "weight_map")


def test_a_gguf_path_that_is_a_device_or_a_fifo(tmp_path: Path) -> None:
    (tmp_path / "zero.gguf").symlink_to("/dev/zero")  # the operator named the file: followed, and still checked
    refused(tmp_path / "zero.gguf", "zero.gguf", "not a regular file")
    os.mkfifo(tmp_path / "pipe.gguf")
    refused(tmp_path / "pipe.gguf", "pipe.gguf", "not a regular file")


def test_a_weight_file_that_is_a_fifo(tiny, tmp_path: Path) -> None:
    d = copy(tiny["gpt2"], tmp_path / "m")
    (d / "model.safetensors").unlink()
    os.mkfifo(d / "model.safetensors")
    refused(d, "model.safetensors", "not a regular file")


# -- weights that are not a working model -----------------------------------------------------------------------


def test_a_weight_holding_nan_is_refused_naming_it(tiny, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    d = copy(tiny["gpt2"], tmp_path / "m")
    t = load_file(str(d / "model.safetensors"))
    t["transformer.h.1.mlp.c_fc.weight"][3, 4] = float("nan")
    save_file(t, str(d / "model.safetensors"), metadata={"format": "pt"})
    refused(d, "model.safetensors", "transformer.h.1.mlp.c_fc.weight", "NaN")


def test_weights_whose_forward_pass_overflows_are_refused_naming_the_layer(tiny, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    d = copy(tiny["gpt2"], tmp_path / "m")
    t = load_file(str(d / "model.safetensors"))
    t["transformer.h.1.mlp.c_proj.bias"][:] = 3e38  # finite, but the residual sum overflows
    t["transformer.h.1.attn.c_proj.bias"][:] = 3e38
    save_file(t, str(d / "model.safetensors"), metadata={"format": "pt"})
    refused(d, "model.safetensors", "layer 1", "overflows")


# -- GGUF -------------------------------------------------------------------------------------------------------


class Raw:
    """A GGUF value given as its type and bytes (for values no writer would produce)."""

    def __init__(self, kind: int, payload: bytes) -> None:
        self.kind, self.payload = kind, payload


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _value(v: Any) -> tuple[int, bytes]:
    if isinstance(v, Raw):
        return v.kind, v.payload
    if isinstance(v, bool):
        return 7, struct.pack("<?", v)
    if isinstance(v, int):
        return (4, struct.pack("<I", v)) if v >= 0 else (5, struct.pack("<i", v))
    if isinstance(v, float):
        return 6, struct.pack("<f", v)
    if isinstance(v, str):
        return 8, _string(v)
    if isinstance(v, list) and v and isinstance(v[0], str):
        return 9, struct.pack("<IQ", 8, len(v)) + b"".join(_string(s) for s in v)
    if isinstance(v, list):
        return 9, struct.pack("<IQ", 5, len(v)) + np.asarray(v, dtype=np.int32).tobytes()
    raise TypeError(v)


def gguf_file(valid: Path, out: Path, fields: dict[str, Any] | None = None, drop: tuple[str, ...] = (),
              tensors: dict[str, np.ndarray] | None = None, alignment: int = 32) -> Path:  # fmt: skip
    """The valid GGUF `valid` re-encoded by hand (F32 tensors), with `fields` changed or added (a Raw for any
    bytes), `drop` left out and `tensors` replaced or added: the files a careless tool or an attacker writes."""
    from gguf import GGUFReader

    reader = GGUFReader(str(valid))
    kv: dict[str, Any] = {}
    for f in reader.fields.values():
        if f.name.startswith("GGUF."):
            continue
        if f.types[0].name == "ARRAY" and f.types[-1].name == "STRING":
            kv[f.name] = [bytes(f.parts[i]).decode() for i in f.data]
        elif f.types[0].name == "ARRAY":
            kv[f.name] = [int(f.parts[i][0]) for i in f.data]
        elif f.types[0].name == "STRING":
            kv[f.name] = bytes(f.parts[f.data[0]]).decode()
        else:
            kv[f.name] = f.parts[f.data[0]][0].item()
    kv = {k: v for k, v in (kv | (fields or {})).items() if k not in drop}
    arrays = {t.name: np.asarray(t.data, dtype=np.float32).reshape(tuple(reversed(t.shape.tolist())))
              for t in reader.tensors} | (tensors or {})  # fmt: skip
    head = b"GGUF" + struct.pack("<IQQ", 3, len(arrays), len(kv))
    for k, v in kv.items():
        kind, payload = _value(v)
        head += _string(k) + struct.pack("<I", kind) + payload
    data, offsets = b"", []
    for a in arrays.values():
        data += b"\x00" * (-len(data) % 32)
        offsets.append(len(data))
        data += np.ascontiguousarray(a, dtype=np.float32).tobytes()
    for (name, a), offset in zip(arrays.items(), offsets, strict=True):
        dims = list(reversed(a.shape)) or [1]
        head += _string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        head += struct.pack("<IQ", 0, offset)
    head += b"\x00" * (-len(head) % 32)
    out.write_bytes(head + data)
    return out


def test_the_hand_written_gguf_is_the_same_model(tiny, tmp_path: Path) -> None:
    ours, theirs = load(gguf_file(tiny["gguf"], tmp_path / "same.gguf")), load(tiny["gguf"])
    ids = theirs.tokenize("The cat sat")
    torch.testing.assert_close(ours.logits(ids), theirs.logits(ids), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"llama.block_count": 10**9}, ("llama.block_count", "limit")),
        ({"llama.embedding_length": Raw(6, struct.pack("<f", float("inf")))}, ("llama.embedding_length", "integer")),
        ({"llama.context_length": Raw(6, struct.pack("<f", float("nan")))}, ("llama.context_length", "integer")),
        ({"general.alignment": -32}, ("general.alignment", "power of two")),
        ({"general.alignment": 0}, ("general.alignment", "power of two")),
        ({"general.alignment": 48}, ("general.alignment", "power of two")),
        ({"general.alignment": "32"}, ("general.alignment", "power of two")),
        ({"x.deep": Raw(9, struct.pack("<IQ", 9, 1) * 5000 + struct.pack("<IQ", 4, 0))}, ("x.deep", "nested")),
        ({"x.strings": Raw(9, struct.pack("<IQ", 8, 2**62))}, ("truncated",)),
        ({"x.string": Raw(8, struct.pack("<Q", 2**63))}, ("truncated",)),
        ({"x.ints": Raw(9, struct.pack("<IQ", 5, 2**61))}, ("truncated",)),
        ({"tokenizer.ggml.merges": ["Ġt", "he"]}, ("tokenizer.ggml.merges", "space")),
    ],
)
def test_a_hostile_gguf_is_refused(tiny, tmp_path: Path, fields: dict[str, Any], words: tuple[str, ...]) -> None:
    refused(gguf_file(tiny["gguf"], tmp_path / "bad.gguf", fields), "bad.gguf", *words)


def test_gguf_rope_freqs_of_the_wrong_shape(tiny, tmp_path: Path) -> None:
    three = {"rope_freqs.weight": np.ones(3, dtype=np.float32)}
    refused(gguf_file(tiny["gguf"], tmp_path / "r3.gguf", tensors=three), "rope_freqs.weight", "[3]", "4 frequencies")
    f = gguf_file(tiny["gguf"], tmp_path / "huge.gguf")
    data = f.read_bytes()
    name = _string("rope_freqs.weight")
    # a tensor info claiming [2**32, 2**32] elements: 2**64 wrapped to 0 in int64, now counted exactly (truncated)
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + name + struct.pack("<I", 2) + struct.pack("<QQ", 2**32, 2**32)
    head += struct.pack("<IQ", 0, 0)
    (tmp_path / "only.gguf").write_bytes(head + b"\x00" * (-len(head) % 32) + data[:64])
    with pytest.raises(ModelError, match=r"truncated: rope_freqs\.weight ends at byte 7378697629483820"):
        load(tmp_path / "only.gguf")


def test_gguf_special_tokens_outside_the_vocabulary_are_dropped(tiny, tmp_path: Path) -> None:
    fields = {"tokenizer.ggml.eos_token_id": 10**6, "tokenizer.ggml.bos_token_id": "<s>",
              "tokenizer.ggml.add_bos_token": True}  # fmt: skip
    model = load(gguf_file(tiny["gguf"], tmp_path / "sp.gguf", fields))
    assert model.eos_ids == () and model.bos_id is None
    assert model.tokenize("The cat") == load(tiny["gguf"]).tokenize("The cat")  # no string BOS prepended
    assert any("eos_token_id: 1000000" in w for w in model.warnings)
    assert any("bos_token_id: '<s>'" in w for w in model.warnings)


# -- item 1: weights that cannot change under the server --------------------------------------------------------


def mapped(path: Path) -> bool:
    maps = Path("/proc/self/maps")
    return maps.exists() and str(path.resolve()) in maps.read_text()


@pytest.mark.parametrize("kind", ["gpt2", "gguf"])
def test_a_weights_file_truncated_or_overwritten_in_place(tiny, tmp_path: Path, kind: str) -> None:
    src = tiny[kind]
    path = copy(src, tmp_path / "m") if src.is_dir() else Path(shutil.copy(src, tmp_path / "m.gguf"))
    model = load(path)
    ids = model.tokenize("The cat sat on the mat")
    before = model.logits(ids)
    weights = model.weights_file
    assert not mapped(weights)  # nothing of the file stays mapped: no page of it can fault
    smaller = tiny["llama"] / "model.safetensors" if kind == "gpt2" else tiny["gguf"]
    with weights.open("r+b") as f:  # `cp smaller model.safetensors`: the same inode, rewritten
        f.write(smaller.read_bytes()[:5000])
        f.truncate(2000)
    torch.testing.assert_close(model.logits(ids), before, rtol=0, atol=0)
    assert model.summary()["changed_on_disk"] and "changed on disk" in (model.changed_on_disk() or "")
    with pytest.raises(ModelError):  # a new start-up refuses it, one line
        load(path)


# -- the numbers: losses and perplexity without overflow ---------------------------------------------------------


def test_perplexity_past_a_float_is_inf() -> None:
    assert perplexity(1.0) == pytest.approx(2.718281828)
    assert perplexity(1000.0) == float("inf") and perplexity(float("inf")) == float("inf")
    assert perplexity(float("nan")) != perplexity(float("nan"))


def confident(tiny: dict[str, Path], dst: Path) -> Path:
    """A GPT-2 whose logits span thousands: a wrong target's loss is far over 710 (math.exp's limit)."""
    from safetensors.torch import load_file, save_file

    d = copy(tiny["gpt2"], dst)
    t = load_file(str(d / "model.safetensors"))
    t["transformer.ln_f.weight"] *= 2000.0
    save_file(t, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d


# -- the server: start-up refusals are one line and exit 2; a served model answers every request ------------------


def serve(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    run_env = os.environ | {"ATTENTION_LAB_DEVICE": "cpu", "ATTENTION_LAB_PRETRAINED": "false"} | (env or {})
    run_env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    cmd = [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(free_port()), *args]
    return subprocess.run(cmd, cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=timeout)


def one_line(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("attention-lab: "), proc.stderr[-3000:]
    assert all(w in lines[0] for w in words), lines[0]


def test_serve_refuses_a_bad_folder_in_one_line_with_workers_too(tiny, tmp_path: Path) -> None:
    one_line(serve(env={"ATTENTION_LAB_MODELS": "/nonexistent"}), "/nonexistent", "not found")
    one_line(serve("--workers", "2", env={"ATTENTION_LAB_MODELS": "/nonexistent"}), "/nonexistent")
    d = copy(tiny["gpt2"], tmp_path / "cut")
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) - 100])
    one_line(serve("--checkpoint", str(d)), "model.safetensors", "truncated")
    edit_config(copy(tiny["gpt2"], tmp_path / "deep"), n_layer=10**12)
    one_line(serve("--workers", "2", "--model", str(tmp_path / "deep")), "n_layer", "limit")


@pytest.fixture(scope="module")
def careless(tiny, tmp_path_factory: pytest.TempPathFactory):
    """A server with the models that load with a warning or a surprise: special tokens outside the vocabulary
    (config and GGUF), and a model confident enough that its mean loss overflows math.exp."""
    root = tmp_path_factory.mktemp("careless")
    d = copy(tiny["gpt2"], root / "specials")
    edit_config(d, bos_token_id=50256, eos_token_id=-3)
    fields = {"tokenizer.ggml.eos_token_id": 10**6, "tokenizer.ggml.bos_token_id": "<s>",
              "tokenizer.ggml.add_bos_token": True}  # fmt: skip
    g = gguf_file(tiny["gguf"], root / "gspecials.gguf", fields)
    c = confident(tiny, root / "confident")
    with make_client(models=os.pathsep.join(map(str, (d, g, c))), pretrained=False) as client:
        yield client


REQUESTS = [
    ("/api/v1/predict", {"text": "The cat sat on the mat"}),
    ("/api/v1/logit_lens", {"text": "The cat sat on the mat"}),
    ("/api/v1/head_ranking", {"text": "The cat sat"}),
    ("/api/v1/attention", {"text": "The cat sat", "layer": 1}),
    ("/api/v1/attention", {"token_ids": "1,2,3", "layer": 1}),
    ("/api/v1/generate", {"text": "The cat", "max_new_tokens": 3}),
    ("/predict", {"text": "The cat sat on the mat"}),
    ("/lens", {"text": "The cat sat on the mat"}),
    ("/generate", {"text": "The cat", "max_new_tokens": 3}),
    ("/", {"text": "The cat sat", "layer": 1}),
]


@pytest.mark.parametrize("preset", ["specials", "gspecials", "confident"])
@pytest.mark.parametrize(("url", "params"), REQUESTS)
def test_a_served_careless_model_answers_every_request(careless, preset: str, url: str, params: dict[str, Any]) -> None:
    r = careless.get(url, params=params | {"preset": preset})
    assert r.status_code < 500, (url, r.status_code, r.text[:1000])


def test_a_huge_loss_is_a_number_or_inf(careless) -> None:
    r = careless.get("/api/v1/predict", params={"preset": "confident", "text": "The cat sat on the mat"})
    assert r.status_code == 200, r.text[:1000]
    body = r.json()
    assert body["mean_loss"] > 710  # math.exp(mean_loss) would raise
    assert body["perplexity"] in (None, float("inf"), "inf", "Infinity")  # inf, as JSON can say it


def test_the_models_listing_shows_no_absolute_paths(careless) -> None:
    rows = careless.get("/api/v1/models").json()["models"]
    assert {m["source"] for m in rows} == {"specials", "gspecials.gguf", "confident"}
    assert all(not m["changed_on_disk"] for m in rows)
    page = careless.get("/models").text
    assert "pytest-of" not in page and "pytest-of" not in json.dumps(rows)  # where the folders are stays private


def test_registry_checks_the_size_before_reading_the_weights(tiny) -> None:
    with pytest.raises(ModelError, match="MAX_MODEL_MB"):
        registry([(tiny["llama"], None)], max_model_mb=0.01)


def test_trace_refuses_a_bad_checkpoint_in_one_line(tiny, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli import main

    d = copy(tiny["gpt2"], tmp_path / "m")
    edit_config(d, n_embd=float("inf"))  # written as Infinity
    assert main(["trace", "a b", "--preset", "checkpoint", "--checkpoint", str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "config.json: n_embd: must be an integer" in err, err
