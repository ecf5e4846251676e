"""The daemon's logs: stdlib ``logging`` with one line per record, JSON or text.

JSON lines (one object per line, encoded with orjson) are the default when stdout is not a
terminal, so a log shipper reads them as they are; a person at a terminal gets text.
Every record may carry ``fields`` (``extra={"fields": {...}}``): they become keys of the
JSON object, or ``key=value`` pairs in text. The request line (``msg: "request"``) is
written by the listener once per request; its fields are ``Trace.fields()``. Prompts and
completions are never logged: no code path puts a body into a record.
"""

from __future__ import annotations

import datetime
import logging
import re
import sys

import orjson

FORMATS = ("json", "text")
LEVELS = ("debug", "info", "warning", "error")

request_log = logging.getLogger("gatewayd.request")


def _time(created: float) -> str:
    return datetime.datetime.fromtimestamp(created, datetime.timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {"time": _time(record.created), "level": record.levelname.lower(), "logger": record.name,
               "msg": record.getMessage()}
        fields = getattr(record, "fields", None)
        if fields:
            doc.update(fields)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


# Every character a log reader could take as the end of a line (Python's str.splitlines splits on
# all of these), or that a terminal would act on: escaped in text lines.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NEEDS_QUOTES = re.compile(r'[\s"=\\]')


def _escape(text: str) -> str:
    return _CONTROL.sub(lambda m: _SHORT.get(m.group(), f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                                               else f"\\u{ord(m.group()):04x}"), text)


def text_value(value) -> str:
    """A field value for a text line: control characters escaped, and quoted (backslash and quote
    escaped) when it holds a space, a quote, ``=`` or a backslash, so a value that comes from a
    client (a request path: ``%0A`` decodes to a newline, ``%20`` to a space) can neither start a
    forged line nor pass as another ``key=value`` field of this one."""
    text = str(value)
    if not text or _NEEDS_QUOTES.search(text):
        return '"' + _escape(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'
    return _escape(text)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = f"{_time(record.created)} {record.levelname:<7} {_escape(record.getMessage())}"
        fields = getattr(record, "fields", None)
        if fields:
            line += " " + " ".join(f"{k}={text_value(v)}" for k, v in fields.items() if v is not None)
        if record.exc_info:  # the traceback's own lines, after the record's one line
            line += "\n" + self.formatException(record.exc_info)
        return line


def default_format() -> str:
    return "text" if sys.stdout.isatty() else "json"


def setup(fmt: str | None = None, level: str = "info") -> None:
    """Route every logger (gatewayd's, hypercorn's, quart's) to one stdout handler."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter() if (fmt or default_format()) == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def event(msg: str, level: int = logging.INFO, **fields) -> None:
    """A daemon event (start-up, shutdown, reload, health change) with its fields."""
    logging.getLogger("gatewayd").log(level, msg, extra={"fields": fields} if fields else None)


def request_line(fields: dict, level: int = logging.INFO) -> None:
    """The request's line. The record is made directly: ``Logger.log`` would walk the stack
    to find the caller's file and line, a third of the line's cost, for a field nobody reads."""
    if request_log.isEnabledFor(level):
        request_log.handle(request_log.makeRecord(request_log.name, level, "gatewayd/app.py", 0, "request", (),
                                                  None, extra={"fields": fields}))
