"""The app icon in each OS's format, made from ``resources/steplog.svg``.

Qt renders the SVG to PNGs (QtSvg ships with PySide6-Essentials); ``.ico`` (Windows) and
``.icns`` (macOS) are containers that may hold PNGs as they are, so both are written here in a
few lines rather than with an image library the project does not otherwise need.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
ICNS_TYPES = {
    b"icp4": 16,
    b"icp5": 32,
    b"icp6": 64,
    b"ic07": 128,
    b"ic08": 256,
    b"ic09": 512,
    b"ic10": 1024,
}
"""ICNS element types that hold a PNG, by pixel size."""


def render_png(svg: Path, size: int) -> bytes:
    """``svg`` rendered to a ``size`` x ``size`` PNG with a transparent background."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QGuiApplication.instance() or QGuiApplication([])
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"error: {svg} is not an SVG Qt can render")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(0)
    painter = QPainter(image)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")  # type: ignore[call-overload]  # the stubs say bytes; PySide6 6.11 wants str
    return bytes(data.data())


def write_ico(svg: Path, out: Path) -> Path:
    """A Windows ``.ico`` holding one PNG per size in ``ICO_SIZES``."""
    pngs = [(size, render_png(svg, size)) for size in ICO_SIZES]
    header = struct.pack("<HHH", 0, 1, len(pngs))
    offset = len(header) + 16 * len(pngs)
    entries, blobs = b"", b""
    for size, png in pngs:
        side = 0 if size >= 256 else size  # 0 means 256 in an ICO directory entry
        entries += struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(png), offset + len(blobs))
        blobs += png
    out.write_bytes(header + entries + blobs)
    return out


def write_icns(svg: Path, out: Path) -> Path:
    """A macOS ``.icns`` holding one PNG per element type in ``ICNS_TYPES``."""
    body = b""
    for kind, size in ICNS_TYPES.items():
        png = render_png(svg, size)
        body += kind + struct.pack(">I", 8 + len(png)) + png
    out.write_bytes(b"icns" + struct.pack(">I", 8 + len(body)) + body)
    return out
