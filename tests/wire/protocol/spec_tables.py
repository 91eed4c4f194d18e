"""The tables of ``protocol/SPEC.md`` as data, so tests hold the code to the spec."""

from __future__ import annotations

import re

from .vectorlib import ROOT

SPEC = ROOT / "protocol" / "SPEC.md"


def _table(heading: str) -> list[list[str]]:
    """Body rows (cells stripped) of the first table at or after the line starting with `heading`."""
    lines = SPEC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows = []
    for line in lines[start:]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[2:]  # drop header and separator


def error_table() -> dict[str, tuple[bool, int | None]]:
    """code -> (fatal, close code) from section 8."""
    out = {}
    for code, fatal, close, *_ in _table("## 8. Errors"):
        out[code.strip("`")] = (fatal == "yes", None if close == "—" else int(close))
    return out


def state_table() -> tuple[list[str], dict[str, dict[str, str]]]:
    """(ops, state -> op -> cell) from section 7."""
    lines = SPEC.read_text(encoding="utf-8").splitlines()
    header = next(line for line in lines if line.startswith("| state \\ op"))
    ops = [c.strip().strip("`") for c in header.strip().strip("|").split("|")][1:]
    table = {}
    for row in _table("| state \\ op"):
        table[row[0]] = dict(zip(ops, row[1:], strict=True))
    return ops, table


def parse_cell(cell: str) -> tuple[str | None, str | None, bool]:
    """A state-table cell as (error code or None, next state or None, ends if done)."""
    if cell == "—":
        return None, None, False
    arrow = re.search(r"→ (\w+)", cell)
    if arrow is None:
        return cell.strip("`"), None, False
    return None, arrow.group(1), "ended if done" in cell


def op_fields(section: str) -> dict[str, list[tuple[str, bool]]]:
    """op -> its fields in order as (name, required), from the field tables of the
    ``### `op``` headings of the section whose heading starts with `section`."""
    lines = SPEC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(section))
    out: dict[str, list[tuple[str, bool]]] = {}
    op = None
    header: list[str] = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        heading = re.match(r"### `(\w+)`", line)
        if heading:
            op = heading.group(1)
            out[op] = []
            header = []
        elif op is not None and line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not header:
                header = cells
            elif header[0] == "field" and not set(cells[0]) <= {"-", " "}:
                out[op].append((cells[0].strip("`"), cells[header.index("required")] == "yes"))
        else:
            header = []  # a table ends at the first line that is not a row
    return out
