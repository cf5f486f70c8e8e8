"""The address students use to open the teacher's view: the QR code and the URL shown in presenter mode.

A teacher usually opens the lab as http://127.0.0.1:8000 on the projecting laptop; that address means "this
machine" on every student's phone. So a loopback host is replaced by this machine's LAN address, read from the
network interfaces (nothing is sent anywhere), unless `public_url` is configured (a reverse proxy, a DNS name).
"""

from __future__ import annotations

import html
import io
import ipaddress
import socket
import struct
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from markupsafe import Markup

from .registry import followable_pattern

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}
SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def unreachable(url_host: str, bind_host: str | None, configured: str | None) -> bool:
    """True when students' phones cannot open an address on `url_host`: it is loopback, or the server listens on
    loopback only and no public URL (a proxy in front) was configured."""
    return is_loopback(url_host) or (configured is None and bind_host is not None and is_loopback(bind_host))


@lru_cache(maxsize=1)
def lan_address() -> str | None:
    """The first private IPv4 address of an interface that is up, or None. Reads the interfaces with ioctl;
    the socket is never connected and sends nothing."""
    try:
        import fcntl
    except ImportError:  # not Linux/Unix
        return None
    found: list[ipaddress.IPv4Address] = []
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in names:
            try:
                packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            addr = ipaddress.IPv4Address(packed[20:24])
            if not addr.is_loopback and not addr.is_link_local and not addr.is_unspecified:
                found.append(addr)
    private = [a for a in found if a.is_private]
    best = private or found
    return str(best[0]) if best else None


def public_base(request_base: str, configured: str | None) -> str:
    """The scheme, host and port students should use, without a trailing slash."""
    if configured:
        return configured.rstrip("/")
    parts = urlsplit(request_base)
    host = parts.hostname or ""
    if is_loopback(host):
        lan = lan_address()
        if lan is not None:
            port = f":{parts.port}" if parts.port else ""
            return f"{parts.scheme}://{lan}{port}"
    return request_base.rstrip("/")


MAX_QR_CHARS = 1200  # beyond this a phone camera struggles anyway


@dataclass(frozen=True)
class QR:
    """A URL drawn as a QR code: an SVG image with a name (role="img", aria-label and segno's <title>), "QR code:
    <url>" unless a page names it in its own language (the `qr_label` template filter: `label`)."""

    url: str

    def svg(self, label: str | None = None) -> Markup:
        return Markup(drawn(self.url, label))

    def __html__(self) -> str:
        return self.svg()

    __str__ = __html__


@lru_cache(maxsize=128)
def drawn(url: str, label: str | None) -> str:
    """The QR code's SVG: encoding a URL took ~10 ms (segno's mask search), and a presenter page draws its students'
    URL again on each htmx swap of the stage (a class steps through the same lesson's URLs): drawn once per URL."""
    import segno

    text = html.escape(label or f"QR code: {url}", quote=True)
    buf = io.BytesIO()
    segno.make(url, error="m").save(buf, kind="svg", scale=5, border=2, xmldecl=False, svgns=True, nl=False,
                                    title=label or f"QR code: {url}")  # fmt: skip
    return buf.getvalue().decode().replace("<svg ", f'<svg role="img" aria-label="{text}" ', 1)


qr_svg = QR  # the URL as a QR code, drawn (SVG, presentation attributes only) where a template shows it


# Pages a class can follow in a room (app/rooms), from the page registry: the lab and the pages built on it.
FOLLOWABLE = followable_pattern()
