"""Stream a multipart upload straight into storage: no temp file, no whole file in memory.

Starlette's `request.form()` spools the file to a temporary file first, which doubles the
disk traffic for a 200 MB batch input and checks the limits only at the end. This parser feeds
each received chunk to python-multipart and writes the `file` part's bytes to the storage
writer as they arrive, counting bytes and lines, and stops with 413 the moment a limit is
crossed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from service.files.storage import FileStorage, StorageWriter
from service.web.errors import APIError

MAX_FIELD_BYTES = 64 * 1024


@dataclass(slots=True)
class UploadLimits:
    max_bytes: int
    max_lines: int


@dataclass(slots=True)
class UploadResult:
    fields: dict[str, str] = field(default_factory=dict)
    filename: str | None = None
    bytes: int = 0
    lines: int = 0  # newline-terminated lines, plus a last unterminated one


class _Receiver:
    """Turns python-multipart callbacks into writes; one instance per request."""

    def __init__(self, storage: FileStorage, key: str, limits: UploadLimits) -> None:
        self.storage, self.key, self.limits = storage, key, limits
        self.result = UploadResult()
        self.writer: StorageWriter | None = None
        self._header_field = b""
        self._header_value = b""
        self._headers: dict[bytes, bytes] = {}
        self._part_name: str | None = None
        self._part_is_file = False
        self._field_buf = bytearray()
        self._last_byte = b"\n"

    def callbacks(self) -> dict[str, object]:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": lambda d, s, e: self._add("_header_field", d[s:e]),
            "on_header_value": lambda d, s, e: self._add("_header_value", d[s:e]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_part_end": self._part_end,
        }

    def _add(self, attr: str, data: bytes) -> None:
        setattr(self, attr, getattr(self, attr) + data)

    def _part_begin(self) -> None:
        self._headers, self._field_buf = {}, bytearray()

    def _header_end(self) -> None:
        self._headers[self._header_field.lower()] = self._header_value
        self._header_field = self._header_value = b""

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        self._part_name = options.get(b"name", b"").decode("latin-1")
        filename = options.get(b"filename")
        self._part_is_file = self._part_name == "file" and filename is not None
        if self._part_is_file:
            if self.writer is not None:
                raise APIError(400, "Send exactly one file.", code="invalid_value", param="file")
            # Stored as text: undecodable bytes become U+FFFD and NUL is dropped.
            self.result.filename = (filename or b"").decode("utf-8", "replace").replace(
                "\x00", "")[:512]
            self.writer = self.storage.open_writer(self.key)

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if start == end:
            return
        chunk = data[start:end]
        if not self._part_is_file:
            self._field_buf += chunk
            if len(self._field_buf) > MAX_FIELD_BYTES:
                raise APIError(413, "A form field is too large.", code="request_too_large")
            return
        res = self.result
        res.bytes += len(chunk)
        res.lines += chunk.count(b"\n")
        self._last_byte = chunk[-1:]
        if res.bytes > self.limits.max_bytes:
            raise APIError(413, f"File exceeds the {self.limits.max_bytes} byte limit.",
                           code="file_too_large", param="file")
        if res.lines > self.limits.max_lines:
            raise APIError(413, f"File exceeds the {self.limits.max_lines} line limit.",
                           code="too_many_lines", param="file")
        assert self.writer is not None
        self.writer.write(chunk)

    def _part_end(self) -> None:
        if self._part_is_file:
            if self._last_byte != b"\n":
                self.result.lines += 1
                if self.result.lines > self.limits.max_lines:
                    raise APIError(413, f"File exceeds the {self.limits.max_lines} line limit.",
                                   code="too_many_lines", param="file")
        elif self._part_name:
            self.result.fields[self._part_name] = self._field_buf.decode("utf-8", "replace")


async def receive_upload(content_type: str, body: AsyncIterator[bytes], *,
                         storage: FileStorage, key: str, limits: UploadLimits) -> UploadResult:
    """Parse the multipart body; the file part lands at `key`, committed only if all went well."""
    ctype, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if ctype != b"multipart/form-data" or not boundary:
        raise APIError(400, "Send the file as multipart/form-data.", code="invalid_value")
    receiver = _Receiver(storage, key, limits)
    parser = MultipartParser(boundary, receiver.callbacks())  # type: ignore[arg-type]
    try:
        async for chunk in body:
            parser.write(chunk)
        parser.finalize()
    except MultipartParseError as exc:
        if receiver.writer is not None:
            receiver.writer.abort()
        raise APIError(400, f"Malformed multipart body: {exc}", code="invalid_value") from exc
    except BaseException:
        if receiver.writer is not None:
            receiver.writer.abort()
        raise
    if receiver.writer is None:
        raise APIError(400, "Missing the 'file' part.", code="invalid_value", param="file")
    receiver.writer.commit()
    return receiver.result
