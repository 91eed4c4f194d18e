"""Writing a run: ``report.md`` (tables), ``report.json`` (everything but raw samples),
``samples.json`` (per-step latencies) and PNG plots, all in the output folder."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .suite import Section

__all__ = ["markdown", "plot_latency", "plot_throughput", "write_run"]


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|")


def section_markdown(section: Section) -> str:
    lines = [f"### {section.title}", ""]
    if section.status != "ok":
        lines += [f"*{section.status}: {section.reason}*", ""]
    if section.rows:
        lines.append("| " + " | ".join(c.header for c in section.columns) + " |")
        lines.append("|" + "|".join("---" if not c.fmt else "---:" for c in section.columns) + "|")
        for row in section.rows:
            cells = (_cell(c.render(row.get(c.key))) for c in section.columns)
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += [f"{note}\n" for note in section.notes]
    return "\n".join(lines)


def markdown(run: dict[str, Any], sections: Sequence[Section], plots: Sequence[str]) -> str:
    """The run as one markdown document: header, then a table per scenario."""
    machine = run["machine"]
    head = [
        "## openenv-ws benchmark",
        "",
        f"- when: {run['started']} ({run['duration_s']:.0f} s)",
        f"- machine: {machine['cpu']}, {machine['cores']} cores, {machine['memory_gb']:.0f} GB, "
        f"{machine['os']}; Python {machine['python']}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in machine['versions'].items())}",
        f"- command: `{run['command']}`",
        "",
    ]
    body = [section_markdown(s) for s in sections]
    figures = [f"![{Path(p).stem}]({Path(p).name})\n" for p in plots]
    return "\n".join(head + body + figures)


def _section_json(section: Section) -> dict[str, Any]:
    return {
        "name": section.name,
        "title": section.title,
        "status": section.status,
        "reason": section.reason,
        "columns": [{"key": c.key, "header": c.header} for c in section.columns],
        "rows": section.rows,
        "notes": section.notes,
        "curves": {k: [list(p) for p in v] for k, v in section.curves.items()},
    }


def write_run(
    out: Path, run: dict[str, Any], sections: Sequence[Section], plots: bool
) -> list[Path]:
    """Write every file of a run into `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    images: list[str] = []
    if plots:
        for name, draw in (("latency.png", plot_latency), ("throughput.png", plot_throughput)):
            if draw(sections, out / name):
                images.append(name)
                written.append(out / name)
    data = {**run, "sections": [_section_json(s) for s in sections], "plots": images}
    (out / "report.json").write_text(json.dumps(data, indent=1, default=_jsonable) + "\n")
    samples = {
        s.name: {
            obs: {k: [round(x * 1e6, 1) for x in v] for k, v in by.items()}
            for obs, by in s.samples.items()
        }
        for s in sections
        if s.samples
    }
    (out / "samples.json").write_text(json.dumps({"unit": "us", "sections": samples}) + "\n")
    (out / "report.md").write_text(markdown(run, sections, images))
    return [out / "report.md", out / "report.json", out / "samples.json", *written]


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return str(value)


_STYLES = ("-", "--", ":", "-.")


def line_looks(labels: Sequence[str], palette: Any) -> dict[str, tuple[Any, str]]:
    """(colour, line style) per label, the same in every panel: the ten colours of
    `palette`, then again dashed, dotted, dash-dotted (40 distinct looks)."""
    return {
        label: (palette(i % 10), _STYLES[i // 10 % len(_STYLES)]) for i, label in enumerate(labels)
    }


def plot_latency(sections: Sequence[Section], path: Path) -> bool:
    """Step latency distributions (ECDF, log time axis), one panel per obs type."""
    merged: dict[str, dict[str, list[float]]] = {}
    for section in sections:
        for obs, by_label in section.samples.items():
            merged.setdefault(obs, {}).update(by_label)
    if not merged:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    labels = sorted({label for by_label in merged.values() for label in by_label})
    looks = line_looks(labels, plt.get_cmap("tab10"))
    fig, axes = plt.subplots(1, len(merged), figsize=(5.5 * len(merged), 4.2), squeeze=False)
    for ax, (obs, by_label) in zip(axes[0], merged.items(), strict=True):
        for label, seconds in sorted(by_label.items(), key=lambda kv: float(np.median(kv[1]))):
            us = np.sort(np.asarray(seconds)) * 1e6
            fraction = np.arange(1, len(us) + 1) / len(us)
            colour, style = looks[label]
            ax.step(us, fraction, where="post", label=label, color=colour, linestyle=style)
        ax.set_xscale("log")
        ax.set_xlabel("step latency (µs, log scale)")
        ax.set_ylabel("fraction of steps ≤ x")
        ax.set_title(f"{obs} observations")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("Single-session step latency per transport")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_throughput(sections: Sequence[Section], path: Path) -> bool:
    """Aggregate steps/s against the number of sessions, with the in-process line."""
    curves = {k: v for s in sections for k, v in s.curves.items() if v}
    if not curves:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, points in curves.items():
        xs, ys = zip(*points, strict=True)
        if label.startswith("in-process"):
            ax.plot(xs, ys, linestyle="--", color="grey", label=f"{label} (1 core)")
        else:
            ax.plot(xs, ys, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sessions")
    ax.set_ylabel("aggregate steps/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Throughput vs number of sessions")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
