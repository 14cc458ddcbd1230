"""What is attached, as tokens: the kind of each attachment, names that lie, encrypted archives, HTML forms.

Phishing attaches a login page (HTML or SVG with a form or a script), or an
archive a scanner cannot open (encrypted, or a disk image); shops attach
invoices as PDF. Read from each part's type, file name and first decoded bytes
(message.Part.head); nothing is unpacked beyond the zip headers in those bytes.
"""

from __future__ import annotations

import struct

from spamd.mail.message import ParsedMessage, Part

MAX_ATTACHMENTS = 20
MAX_ZIP_ENTRIES = 10
_KIND_OF_EXTENSION = {
    **dict.fromkeys(("html", "htm", "shtml", "xhtml", "mht", "mhtml"), "html"),
    "svg": "svg",
    "pdf": "pdf",
    **dict.fromkeys(
        (
            "zip",
            "rar",
            "7z",
            "gz",
            "tgz",
            "tar",
            "bz2",
            "xz",
            "cab",
            "ace",
            "arj",
            "lzh",
            "z",
        ),
        "archive",
    ),
    **dict.fromkeys(("iso", "img", "vhd", "vhdx", "dmg", "udf"), "disk-image"),
    **dict.fromkeys(
        (
            "exe",
            "scr",
            "com",
            "bat",
            "cmd",
            "js",
            "jse",
            "vbs",
            "vbe",
            "wsf",
            "hta",
            "lnk",
            "msi",
            "jar",
            "ps1",
            "pif",
            "cpl",
            "reg",
            "url",
        ),
        "executable",
    ),  # fmt: skip
    **dict.fromkeys(
        (
            "doc",
            "docx",
            "docm",
            "xls",
            "xlsx",
            "xlsm",
            "xlsb",
            "ppt",
            "pptx",
            "pptm",
            "odt",
            "ods",
            "rtf",
            "one",
        ),
        "office",
    ),  # fmt: skip
    **dict.fromkeys(("jpg", "jpeg", "png", "gif", "bmp", "webp", "tif", "tiff", "heic"), "image"),
    **dict.fromkeys(("ics", "vcs"), "calendar"),
    **dict.fromkeys(("txt", "csv", "eml", "msg"), "text"),
}
_KIND_OF_TYPE = {
    "text/html": "html",
    "image/svg+xml": "svg",
    "application/pdf": "pdf",
    "application/zip": "archive",
    "application/x-zip-compressed": "archive",
    "application/x-rar-compressed": "archive",
    "application/vnd.rar": "archive",
    "application/x-7z-compressed": "archive",
    "application/gzip": "archive",
    "application/x-iso9660-image": "disk-image",
    "application/x-msdownload": "executable",
    "text/calendar": "calendar",
}
# What a kind's file starts with: a name whose bytes say otherwise lies about itself.
_MAGIC = {
    "pdf": (b"%PDF",),
    "archive": (
        b"PK",
        b"Rar!",
        b"7z\xbc\xaf",
        b"\x1f\x8b",
        b"MSCF",
        b"BZh",
        b"\xfd7zXZ",
    ),
}
_ZIP_LOCAL_HEADER = b"PK\x03\x04"
# Markup signs of a login page or a script that writes one.
_HTML_SIGNS = {
    "<form": "form",
    'type="password"': "password",
    "type=password": "password",
    "type='password'": "password",
    "<script": "script",
    "atob(": "obfuscated-script",
    "unescape(": "obfuscated-script",
    "eval(": "obfuscated-script",
    "document.write": "obfuscated-script",
    "window.location": "redirect",
    'http-equiv="refresh"': "redirect",
}


def extension(filename: str) -> str:
    """The lower-cased last extension of a file name, at most 10 characters; '' if none."""
    name = filename.strip().strip("\"'").lower()
    return name.rpartition(".")[2][:10] if "." in name else ""


def kind_of(part: Part) -> str:
    """html, svg, pdf, archive, disk-image, executable, office, image, calendar, text or other: by name, else type."""
    return (
        _KIND_OF_EXTENSION.get(extension(part.filename))
        or _KIND_OF_TYPE.get(part.content_type)
        or ("image" if part.content_type.startswith("image/") else "other")
    )


def zip_tokens(head: bytes) -> list[str]:
    """Encrypted entries and the kinds of the entries' names, from the zip local headers in the first bytes."""
    tokens: list[str] = []
    offset = 0
    for _ in range(MAX_ZIP_ENTRIES):
        if head[offset : offset + 4] != _ZIP_LOCAL_HEADER or len(head) < offset + 30:
            break
        flags, compressed, name_length, extra_length = struct.unpack_from("<H10xI4xHH", head, offset + 6)
        if flags & 1:
            tokens.append("attach:encrypted-archive")
        name = head[offset + 30 : offset + 30 + name_length].decode("cp437")
        inner = _KIND_OF_EXTENSION.get(extension(name), "other")
        tokens.append("attach-archive-holds:" + inner)
        if flags & 8:  # sizes after the data: the next header cannot be found from here
            break
        offset += 30 + name_length + extra_length + compressed
    return tokens


def markup_tokens(head: bytes, kind: str) -> list[str]:
    """Signs of a login page in an HTML or SVG attachment's first bytes."""
    text = head.decode("latin-1").lower()
    return [f"attach-{kind}:{sign}" for sign in dict.fromkeys(s for marker, s in _HTML_SIGNS.items() if marker in text)]


def part_tokens(part: Part) -> list[str]:
    """One attachment's tokens: its kind, a double or mismatched extension, its contents' signs."""
    kind = kind_of(part)
    tokens = ["attach-kind:" + kind]
    name = part.filename.strip().strip("\"'").lower()
    inner_extension = extension(name.rpartition(".")[0])
    if inner_extension in _KIND_OF_EXTENSION and kind not in ("image", "other"):
        tokens.append("attach:double-extension")
    typed = _KIND_OF_TYPE.get(part.content_type)
    if typed and typed != kind:
        tokens.append("attach:type-mismatch")
    magic = _MAGIC.get(kind)
    head = part.head  # decoded at each ask
    if magic and head and not head.startswith(magic):
        tokens.append("attach:content-mismatch")
    if head.startswith(_ZIP_LOCAL_HEADER):
        tokens += zip_tokens(head)
    if kind in ("html", "svg") and head:
        tokens += markup_tokens(head, kind)
    return tokens


def is_attachment(part: Part) -> bool:
    """A part with a file name, or one that is neither text nor an inline image."""
    return bool(part.filename) or not part.content_type.startswith(("text/", "image/", "multipart/", "message/"))


def attachment_tokens(msg: ParsedMessage) -> list[str]:
    """Tokens of what is attached (none for a message without attachments)."""
    attached = [p for p in msg.parts if is_attachment(p)][:MAX_ATTACHMENTS]
    if not attached:
        return []
    tokens = [f"attach-count:{min(len(attached), 5)}"]
    for part in attached:
        tokens += part_tokens(part)
    return list(dict.fromkeys(tokens))
