"""`make image` and `make image-check`: build the image from the Dockerfile, then run it and check over loopback
HTTP that it serves everything `make run` serves.

    python3 ops/image_check.py build   # docker build (podman: --format docker, which keeps the HEALTHCHECK)
    python3 ops/image_check.py check   # run the image on a free loopback port, check it, remove the container

IMAGE (attention-lab) names the image; IMAGE_BUILD replaces the build command (e.g. a wrapper that adds a
network or a mount) and BUILD_ARGS adds to it (e.g. "--build-arg TORCH_INDEX=https://…/cu128");
CONTAINER_ENGINE picks docker or podman. Without a container engine both say so and exit 0.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from urllib.parse import quote

from oci import (
    IMAGE,
    ROOT,
    CheckFailed,
    engine,
    free_port,
    healthy,
    http,
    image_exists,
    ok,
    require,
    run,
    say,
    stop_on_sigterm,
    wait_for,
)

# The presets `make run` offers: the built-in ones and the two from the weights packages it installs.
MAKE_RUN_PRESETS = ("toy", "gpt2-small", "minilm", "smollm2")
FONT = "/vendor/math-font/noto-sans-math-latin-400-normal.woff2"
TEXT = "The cat sat on the mat."


def build() -> int:
    eng = engine()
    cmd = shlex.split(os.environ.get("IMAGE_BUILD", "")) or [eng, "build"]
    if cmd == ["podman", "build"]:
        cmd += ["--format", "docker"]  # the OCI format (podman's default) has no HEALTHCHECK
    cmd += [*shlex.split(os.environ.get("BUILD_ARGS", "")), "-t", IMAGE, ROOT]
    say(f"building {IMAGE}: {' '.join(cmd)}")
    start = time.perf_counter()
    rc = subprocess.run(cmd).returncode
    if rc != 0:
        say(f"FAILED: the build exited {rc}")
        return rc
    size = int(run([eng, "image", "inspect", "--format", "{{.Size}}", IMAGE]).strip())
    say(f"built {IMAGE} in {time.perf_counter() - start:.0f} s: {size / 1e6:.0f} MB")
    return 0


def inspect(eng: str, fmt: str) -> str:
    return run([eng, "image", "inspect", "--format", fmt, IMAGE]).strip()


def check() -> int:
    eng = engine()
    require(image_exists(eng), f"no image {IMAGE}: run `make image` first")
    say(f"checking {IMAGE} ({eng})")
    size = int(inspect(eng, "{{.Size}}"))
    ok(f"image size {size / 1e6:.0f} MB")
    user = inspect(eng, "{{.Config.User}}")
    require(user not in ("", "0", "root"), f"the image runs as root (User={user!r})")
    ok(f"runs as user {user!r}")
    health = inspect(eng, "{{json .Config.Healthcheck}}")
    require(
        health not in ("", "null", "{}"),
        "the image has no HEALTHCHECK (built in OCI format? podman needs `build --format docker`)",
    )
    ok("declares a HEALTHCHECK on /healthz")

    port = free_port()
    name = f"attention-lab-check-{os.getpid()}"
    start = time.perf_counter()
    run([eng, "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8000", IMAGE])
    try:
        _check_running(eng, name, port, start)
    except BaseException:
        say("--- the container's last log lines:")
        say(run([eng, "logs", "--tail", "40", name], check=False, merge=True))
        raise
    finally:
        run([eng, "rm", "-f", name], check=False, quiet=True)
    say(f"PASSED: {IMAGE} serves every preset of `make run`, its pages, the notebook package and the math font")
    return 0


def _check_running(eng: str, name: str, port: int, start: float) -> None:
    wait_for("/healthz answering", lambda: healthy(port), timeout=240)
    ok(f"/healthz answers {time.perf_counter() - start:.1f} s after `{eng} run`")

    out = run([eng, "exec", name, "python", "-c", "import attention_lab, os; print(attention_lab.trace.__name__, "
               "os.getuid())"])  # fmt: skip
    require(out.split()[0] == "trace", f"attention_lab inside: {out!r}")
    require(out.split()[1] != "0", f"the server's user inside is root: {out!r}")
    ok(f"`python -c 'import attention_lab'` works inside (uid {out.split()[1]})")

    css = http(port, "/vendor/math-font.css")
    require(css.status == 200 and b"Lab Math" in css.body, f"math-font.css has no @font-face: {css.body[:80]!r}")
    font = http(port, FONT)
    require(font.status == 200 and font.body[:4] == b"wOF2", f"{FONT}: {font.status} {font.body[:20]!r}")
    require(font.headers.get("content-type", "").startswith("font/woff2"), f"{FONT}: {font.headers}")
    ok(f"the math font is served: @font-face in /vendor/math-font.css, {FONT} ({len(font.body)} bytes of woff2)")
    for script in ("/vendor/htmx/htmx.min.js", "/vendor/htmx-sse/sse.min.js"):  # from npm, as `make` installs them
        js = http(port, script)
        require(js.status == 200 and len(js.body) > 1000, f"{script}: {js.status}, {len(js.body)} bytes")
    ok("htmx and its SSE extension are served from the image's node_modules")

    presets = http(port, "/api/v1/presets").json()["presets"]
    missing = [p for p in MAKE_RUN_PRESETS if p not in presets]
    require(not missing, f"presets missing from the image: {missing} (it offers {sorted(presets)})")
    for preset, info in presets.items():
        query = f"preset={quote(preset)}" + (f"&text={quote(TEXT)}" if info.get("pretrained") else "")
        r = http(port, f"/api/v1/attention?{query}")
        require(r.status == 200, f"/api/v1/attention?{query}: {r.status} {r.body[:300]!r}")
        body = r.json()
        stages = [s.get("key") for s in body.get("stages", [])]
        require(body.get("spec", {}).get("preset") == preset and len(stages) == 5 and body.get("tokens"),
                f"{preset}: not a five-stage trace of this preset: {r.body[:300]!r}")  # fmt: skip
        ok(f"preset {preset}: a five-stage trace of {len(body['tokens'])} tokens, first request {r.seconds:.2f} s")

    for page, query in (("/", "preset=toy&stage=softmax"), ("/", f"preset=smollm2&text={quote(TEXT)}&layer=3")):
        html = http(port, f"{page}?{query}")
        require(html.status == 200 and html.headers.get("content-type", "").startswith("text/html"),
                f"{page}?{query}: {html.status} {html.headers.get('content-type')}")  # fmt: skip
        require(b"/vendor/math-font.css" in html.body, f"{page}?{query}: the page does not load the math font")
        twin = "/index.json" if page == "/" else f"{page}.json"
        data = http(port, f"{twin}?{query}")
        require(data.status == 200 and data.headers.get("content-type", "").startswith("application/json"),
                f"{twin}?{query}: {data.status} {data.headers.get('content-type')}")  # fmt: skip
        twin_body = data.json()
        real = "preset=smollm2" in query
        require(twin_body.get("random_weights") is (not real) and twin_body.get("tokens"),
                f"{twin}?{query}: random_weights={twin_body.get('random_weights')!r}")  # fmt: skip
        ok(f"page {page}?{query} ({len(html.body) // 1024} KB, {html.seconds:.2f} s) and its JSON twin {twin}")

    if eng == "podman":  # docker runs the HEALTHCHECK on its own schedule; podman runs it when asked
        run(["podman", "healthcheck", "run", name])
        ok("`podman healthcheck run` reports healthy")


def main(argv: list[str]) -> int:
    steps = argv[1:] or ["build", "check"]
    if any(s not in ("build", "check") for s in steps):
        print(__doc__)
        return 2
    try:
        for step in steps:
            rc = build() if step == "build" else check()
            if rc:
                return rc
    except CheckFailed as e:
        say(f"FAILED: {e}")
        return 1
    return 0


if __name__ == "__main__":
    stop_on_sigterm()
    sys.exit(main(sys.argv))
